"""pg_restore's list files: the advice's split (its early foreign keys
last) and the live monitor's reading of `-L` (only regular files: a pipe is
pg_restore's to read)."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from pgparmon.cmdline import ClientArgs
from pgparmon.jobs.pg_restore import use_list_path
from pgparmon.jobs.restore_list import (
    ListError,
    id_pattern,
    listed_ids,
    read_use_list,
    split_ids,
)

LISTING = """;
; Archive created at 2026-11-27 10:00:00 UTC
;     dbname: shop
;
; Selected TOC Entries:
;
215; 1259 16390 TABLE public orders postgres
3340; 0 16390 TABLE DATA public orders postgres
3350; 2606 16400 CONSTRAINT public orders orders_pkey postgres
3351; 1259 16401 INDEX public lines_order_idx postgres
3355; 2606 16507 FK CONSTRAINT public orders orders_customer_id_fkey postgres
3356; 2606 16536 FK CONSTRAINT public "FK CONSTRAINT x" lines_fkey postgres
3357; 2606 16537 CONSTRAINT public "a FK CONSTRAINT b" b_pkey postgres
"""


def test_the_split_puts_the_keys_in_the_second_list_and_nothing_else() -> None:
    rest, fks = split_ids(LISTING, [3356, 3355])
    assert listed_ids(fks) == {3355, 3356}
    assert listed_ids(rest) == {215, 3340, 3350, 3351, 3357}
    # the comments stay with the rest (pg_restore skips them); a dump id is
    # matched whole (3355 is neither 33550 nor 13355)
    assert rest.startswith(";\n; Archive created")
    assert listed_ids(split_ids("33550; 1 2 X\n13355; 1 2 Y\n", [3355])[0]) == {33550, 13355}
    # the pattern is what `grep -E` is given in the advice's command: the
    # same lines match there
    grep = subprocess.run(["grep", "-E", id_pattern([3355, 3356])], input=LISTING,
                          capture_output=True, text=True, check=True).stdout
    assert grep == fks


def test_a_listing_without_the_keys_gives_an_empty_second_list() -> None:
    rest, fks = split_ids("215; 1259 16390 TABLE public t postgres\n", [3355])
    assert fks == "" and listed_ids(rest) == {215}


def test_commented_and_blank_lines_select_nothing() -> None:
    assert listed_ids(";3355; 2606 16507 FK CONSTRAINT public a b c\n\n  12; 0 1 TABLE x\n"
                      "junk\n") == {12}


def test_a_list_file_is_read_and_a_pipe_is_refused_without_waiting(tmp_path: Path) -> None:
    f = tmp_path / "x.list"
    f.write_text(LISTING)
    assert read_use_list(str(f)) == {215, 3340, 3350, 3351, 3355, 3356, 3357}
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    out: list[object] = []

    def read() -> None:
        try:
            out.append(read_use_list(str(fifo)))
        except ListError as exc:
            out.append(exc)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "read_use_list opened a pipe and waited on it"
    assert isinstance(out[0], ListError) and "not a regular file" in str(out[0])
    with pytest.raises(ListError, match="No such file"):
        read_use_list(str(tmp_path / "missing.list"))


def test_the_list_path_is_the_processes_own(tmp_path: Path) -> None:
    def args(path: str | None) -> ClientArgs:
        return ClientArgs(program="pg_restore",
                          options=(("jobs", "2"),) + ((("use-list", path),) if path else ()))

    assert use_list_path(args(None), os.getpid()) == (None, None)
    assert use_list_path(args("/srv/a.list"), None) == ("/srv/a.list", None)
    # relative: in the process's working folder, not pgparmon's
    assert use_list_path(args("a.list"), os.getpid()) == (os.path.join(os.getcwd(), "a.list"),
                                                          None)
    path, why = use_list_path(args("a.list"), 2 ** 22 + 12345)
    assert path is None and why and "working folder" in why


def test_the_four_steps_parse_in_a_posix_shell_with_awkward_names() -> None:
    """The advice's command for such an archive (one line, for sh or bash):
    names with spaces and quotes stay single words, and each step's list is
    the one it names."""
    from pgparmon.advise.strategies import sectioned_restore

    cmd = sectioned_restore("pg_restore", ["-h", "/tmp/x y", "-p", "5433"], "it's db",
                            "/srv/dump dir", 4, [3356, 3355])
    assert subprocess.run(["sh", "-n", "-c", cmd]).returncode == 0
    steps = cmd.split(" && ")
    assert steps[0] == 'L="$(mktemp -d)"' and steps[-1] == 'rm -r "$L"'
    assert "grep -Ev '^(3355|3356);' > \"$L/rest.list\"" in steps[1]
    assert "grep -E '^(3355|3356);' > \"$L/fk.list\"" in steps[2]
    assert steps[3].startswith("pg_restore --section=pre-data ") and "-j" not in steps[3]
    assert '--section=post-data -L "$L/rest.list"' in steps[5]
    assert steps[6].startswith('pg_restore -j 4 -L "$L/fk.list"')
    assert all(s.endswith("-d 'it'\"'\"'s db' '/srv/dump dir'") for s in steps[3:7])
