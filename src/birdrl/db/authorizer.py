"""What model SQL may do: the authorizer and progress handler of a sandbox connection.

Refuses file access outside the replica (ATTACH of files, VACUUM INTO), extension loading,
and PRAGMAs that change files, durability or limits; stops statements past their deadline.
"""

from __future__ import annotations

import sqlite3
import time

__all__ = ["Guard"]


# PRAGMAs a model may run in any form: introspection or connection-local settings that
# cannot reach another file and do not weaken crash safety.
_PRAGMAS_ANY_FORM = frozenset(
    {
        "analysis_limit", "application_id", "automatic_index", "case_sensitive_like",
        "cell_size_check", "collation_list", "compile_options", "count_changes",
        "data_version", "database_list", "defer_foreign_keys", "foreign_key_check",
        "foreign_key_list", "foreign_keys", "freelist_count", "full_column_names",
        "function_list", "ignore_check_constraints", "index_info", "index_list",
        "index_xinfo", "integrity_check", "legacy_alter_table", "module_list", "optimize",
        "page_count", "pragma_list", "query_only", "quick_check", "recursive_triggers",
        "reverse_unordered_selects", "short_column_names", "stats", "table_info",
        "table_list", "table_xinfo", "user_version",
    }
)  # fmt: skip
# PRAGMAs a model may read but not set: setting them changes files, durability or limits.
_PRAGMAS_READ_ONLY = frozenset(
    {
        "auto_vacuum", "busy_timeout", "cache_size", "cache_spill", "encoding",
        "hard_heap_limit", "journal_mode", "journal_size_limit", "locking_mode",
        "max_page_count", "mmap_size", "page_size", "schema_version", "secure_delete",
        "soft_heap_limit", "synchronous", "temp_store", "threads", "trusted_schema",
        "wal_autocheckpoint",
    }
)  # fmt: skip
_DENIED_FUNCTIONS = frozenset(
    {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "sqlite_dbpage"}
)
_IN_MEMORY_ATTACH = frozenset({"", ":memory:"})


class Guard:
    """Authorizer + progress handler state of one connection."""

    def __init__(self) -> None:
        self.refusal: str | None = None
        self.limit: str | None = None  # a size limit a guarded function refused (FormatGuard)
        self.deadline = float("inf")
        self.timed_out = False
        self.closing = False
        self.trusted = False  # the sandbox's own statements (size caps) run unchecked
        self.attached = False  # an ATTACH was authorized: cap the new database's size

    def start(self, timeout_s: float) -> None:
        """Arm for the next statement: clear what the last one left, set its deadline."""
        self.refusal = None
        self.limit = None
        self.timed_out = False
        self.attached = False
        self.deadline = time.monotonic() + timeout_s

    def authorize(
        self, action: int, arg1: str | None, arg2: str | None, _db: str | None, _src: str | None
    ) -> int:
        if self.trusted:
            return sqlite3.SQLITE_OK
        reason = self._refuse(action, arg1, arg2)
        if reason is None:
            if action == sqlite3.SQLITE_ATTACH:
                self.attached = True
            return sqlite3.SQLITE_OK
        self.refusal = reason
        return sqlite3.SQLITE_DENY

    @staticmethod
    def _refuse(action: int, arg1: str | None, arg2: str | None) -> str | None:
        if action == sqlite3.SQLITE_ATTACH:
            if arg1 in _IN_MEMORY_ATTACH:  # plain VACUUM attaches a temporary '' database
                return None
            # arg1 is None when the file name is an expression, not a literal
            target = "a computed file name" if arg1 is None else repr(arg1)
            return (
                f"ATTACH/VACUUM INTO of {target} is not allowed: the sandbox only gives access "
                "to this trajectory's own database (ATTACH ':memory:' is allowed)"
            )
        if action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if name in _PRAGMAS_ANY_FORM:
                return None
            if name in _PRAGMAS_READ_ONLY:
                if arg2 is None:
                    return None
                return f"PRAGMA {name} may be read but not set in the sandbox"
            return f"PRAGMA {name} is not allowed in the sandbox"
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
            return f"function {arg2}() is not allowed in the sandbox"
        return None

    def progress(self) -> int:
        if self.closing:
            return 1
        if time.monotonic() > self.deadline:
            self.timed_out = True
            return 1
        return 0
