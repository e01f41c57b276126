"""`pgparmon demo` end to end: its own throwaway cluster, a real parallel
dump and restore, each on the live screen in a terminal, then its closing
word: what ran, its time and what limited it, where the recordings are and
the commands to look at them again, all of which work."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import in_terminal, pgparmon_cmd

from pgparmon.record import read_recording
from pgparmon import units as fmt
from pgparmon.sample import read_samples
from pgparmon.views.summary import end_summary, limits

pytestmark = pytest.mark.integration

# a terminal's escape sequences: CSI, OSC, charset and keypad modes
ANSI = re.compile(rb"\x1b(\[[0-9;?<=>]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)"
                  rb"|[()][0-9A-Za-z]|[=>78])")


def test_demo_in_a_terminal_ends_with_what_ran_and_where_to_look_again(tmp_path: Path) -> None:
    screens: list[bytes] = []

    def quit_each_end_screen(out: bytes, pid: int) -> bytes | None:
        # each job's end screen waits for q: the dump's, then, after the
        # demo's line that starts the restore, the restore's
        since = ([0, out.find(b"pg_restore -j 2 into database")][len(screens)]
                 if len(screens) < 2 else -1)
        if since >= 0 and b"press q" in out[since:]:
            screens.append(b"q")
            return b"q"
        return None

    argv = [sys.executable, "-m", "pgparmon", "demo", "--scale", "0.1", "-j", "2",
            "--interval", "0.3"]
    out, code = in_terminal(argv, {**os.environ, "TERM": "xterm-256color"},
                            quit_each_end_screen, size=(40, 120), timeout=300)
    text = ANSI.sub(b"", out).decode("utf-8", "replace").replace("\r", "")
    assert code == 0, text[-3000:]
    assert len(screens) == 2, text[-3000:]
    # the closing word comes after the last screen, whole lines
    tail = text[text.rindex("pgparmon demo: 2 of 2 jobs ran"):]
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    recs = [ln for ln in lines if ln.startswith("/") and ln.endswith(".pgparmon.gz")]
    assert len(recs) == 2, tail
    try:
        assert [os.path.basename(r) for r in recs] == ["dump.pgparmon.gz",
                                                       "restore.pgparmon.gz"]
        assert oct(os.stat(os.path.dirname(recs[0])).st_mode & 0o777) == "0o700"
        for i, (rec, kind, db) in enumerate(zip(recs, ("pg_dump", "pg_restore"),
                                                ("sample", "restored"), strict=True), 1):
            r = read_recording(rec)
            assert not r.truncated and r.summary is not None
            assert r.summary["state"] == "finished"
            samples = read_samples(r.samples)
            es = end_summary(r.summary, samples)
            head = next(ln for ln in lines if ln.startswith(f"{i}/2 {kind} -j 2 on {db}:"))
            assert f"finished (exit code 0) in {fmt.duration(es.facts.wall_s)};" in head
            assert f"{es.facts.items_done}/{es.facts.items_total} items" in head
            k = lines.index(head)
            assert lines[k + 1] == f"limited by: {limits(samples, 3)}"
            assert f"pgparmon replay {rec}" in lines
            name = "dump" if i == 1 else "restore"
            assert f"pgparmon report {rec} --html {name}.html" in lines
            # the commands it prints work
            html = tmp_path / f"{name}.html"
            rep = subprocess.run(pgparmon_cmd("report", rec, "--html", str(html)),
                                 capture_output=True, text=True, timeout=120)
            assert rep.returncode == 0, rep.stderr
            assert f"pgparmon report: {kind} of {db}" in html.read_text()
    finally:
        for rec in recs:
            shutil.rmtree(os.path.dirname(rec), ignore_errors=True)
