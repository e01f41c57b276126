"""The options pg_dump and pg_restore share (their getopt tables overlap),
and the formats they name: the two drivers' client specs start here."""

from __future__ import annotations

from ..cmdline import CONN, Opts, args, flags

DUMP_RESTORE_COMMON: Opts = {
    **CONN, "f": ("file", True), "F": ("format", True), "j": ("jobs", True),
    "n": ("schema", True), "N": ("exclude-schema", True), "S": ("superuser", True),
    "t": ("table", True), "a": ("data-only", False), "s": ("schema-only", False),
    "c": ("clean", False), "C": ("create", False), "O": ("no-owner", False),
    "x": ("no-privileges", False), "R": ("no-reconnect", False),
    "file": ("file", True), "format": ("format", True), "jobs": ("jobs", True),
    "section": ("section", True), "filter": ("filter", True),
    **args("schema", "exclude-schema", "superuser", "table", "restrict-key"),
    **flags("data-only", "schema-only", "clean", "create", "no-owner", "no-privileges",
            "no-acl", "no-reconnect", "disable-triggers", "enable-row-security", "if-exists",
            "no-comments", "no-publications", "no-security-labels", "no-subscriptions",
            "no-table-access-method", "no-tablespaces", "strict-names",
            "use-set-session-authorization", "no-data", "no-schema", "no-statistics",
            "statistics-only", "no-policies"),
}

# pg_dump -F: a letter or the word (and plain's old alias, append)
DUMP_FORMATS = {"c": "custom", "custom": "custom", "d": "directory", "directory": "directory",
                "t": "tar", "tar": "tar", "p": "plain", "plain": "plain", "a": "plain",
                "append": "plain"}
# pg_restore -F: it reads the first letter only
RESTORE_FORMATS = {"c": "custom", "d": "directory", "t": "tar"}
