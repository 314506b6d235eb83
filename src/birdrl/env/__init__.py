"""The SQL-Act environment: tools, tool-call parsing, prompts, and `SQLActEnv`."""
