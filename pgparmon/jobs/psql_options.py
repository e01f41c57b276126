"""psql's command line, as the COPY driver reads it (a load run as
`psql -c "\\copy ..."` or `psql -f script.sql`)."""

from __future__ import annotations

from ..cmdline import CONN, ClientArgs, ClientSpec, Opts, args, flags

_PSQL: Opts = {
    **CONN, "c": ("command", True), "f": ("file", True), "o": ("output", True),
    "v": ("variable", True), "F": ("field-separator", True), "R": ("record-separator", True),
    "P": ("pset", True), "T": ("table-attr", True), "L": ("log-file", True),
    "command": ("command", True), "file": ("file", True), "output": ("output", True),
    "set": ("variable", True), "variable": ("variable", True),
    **args("field-separator", "record-separator", "pset", "table-attr", "log-file"),
    **flags("echo-all", "no-align", "echo-errors", "echo-queries", "echo-hidden", "html",
            "list", "no-readline", "quiet", "single-step", "single-line", "tuples-only",
            "expanded", "no-psqlrc", "field-separator-zero", "record-separator-zero",
            "single-transaction", "csv"),
    **{c: (c, False) for c in "aAbeEHlnqsStxXz01"},
}


def _positional(res: ClientArgs, pos: list[str], dbname: str | None) -> str | None:
    # psql [OPTION]... [DBNAME [USERNAME]]
    if len(pos) > 1 and res.user is None:
        res.user = pos[1]
    if pos and dbname is None:
        return pos[0]
    return dbname


PSQL = ClientSpec(options=_PSQL, positional=_positional)
