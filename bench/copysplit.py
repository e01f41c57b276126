"""A parallel COPY load the way `pgparmon advise --copy`'s command runs it.

    [tail -n +2 FILE |] split -n r/J --filter='psql ... -c "\\copy T FROM STDIN ..."' FILE|-

GNU split hands the file's lines round-robin to J psql sessions. Used by
bench/advise_copy_accuracy.py (this VM) and bench/bighost/sweep.py (the
bundle ships this file next to sweep.py), so both time the same load.

Standard library only (the bundle's sweep.py runs under the host's Python).
"""

from __future__ import annotations

import re
import shlex


def split_copy_cmd(psql: list[str], path: str, jobs: int, table: str, *, fmt: str = "csv",
                   header: bool = True) -> str:
    """The shell command that loads `path` into `table` with `jobs` streams.
    `psql` is the client's argv up to (not including) -c: program,
    connection options, -d DB. Without -q each stream prints its `COPY n`
    (copied_rows adds them up)."""
    opts = "FORMAT csv" if fmt == "csv" else "FORMAT text"
    client = shlex.join([*psql, "-c", f"\\copy {table} FROM STDIN WITH ({opts})"])
    src = shlex.quote(str(path))
    feed = f"tail -n +2 {src} | " if header else ""
    return f"{feed}split -n r/{jobs} --filter={shlex.quote(client)} {'-' if header else src}"


def copied_rows(stdout: str) -> int:
    """The rows the streams' `COPY n` lines say they loaded."""
    return sum(int(n) for n in re.findall(r"^COPY (\d+)$", stdout, re.M))
