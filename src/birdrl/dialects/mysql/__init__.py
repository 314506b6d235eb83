"""MySQL-family engines (MariaDB server; issue 16, in progress). So far: a throwaway local
server for tests, CI and laptops (`local`) and the statement splitter (`statements`). The
dialect is not registered until its replica backend, sandbox and official test-case API
exist (see docs/mysql.md)."""
