"""Sample docs of REAL jobs for the TUI and report tests.

`pgparmon run --json --record FILE` follows a parallel pg_dump and a
pg_restore against the session's throwaway cluster; the JSON Lines it writes
(pgparmon.sample/1 then pgparmon.summary/1) and the recording are kept. Both
test modules use them, so the jobs run once per session (cached here: a
session fixture imported into two modules would run twice).
"""

from __future__ import annotations

import atexit
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support import pgparmon_cmd, read_jsonl

from pgparmon.cluster import Cluster
from pgparmon.record import read_recording

GOLDEN = Path(__file__).parent / "golden" / "tui"


@dataclass(frozen=True)
class JobRun:
    samples: list[dict[str, Any]]
    summary: dict[str, Any]
    recording: Path  # the `run --record` recording of the run


_cache: dict[tuple[int, str], JobRun] = {}
_tmp_dir: list[Path] = []


def _tmp() -> Path:
    """One work directory per session, made on first use, gone at exit."""
    if not _tmp_dir:
        d = Path(tempfile.mkdtemp(prefix="pgparmon-tuijobs-"))
        d.chmod(0o777)  # pg_dump runs as the postgres user when the tests run as root
        atexit.register(shutil.rmtree, d, True)
        _tmp_dir.append(d)
    return _tmp_dir[0]


def _run(cluster: Cluster, argv: list[str], rec: Path) -> JobRun:
    # 0.2 s: a dump of the sample database lasts a few seconds, and the tests
    # need several samples with both workers copying
    res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.2", "--record", str(rec),
                                      "--", *argv),
                         capture_output=True, text=True, env=cluster.env(), timeout=300,
                         check=False)
    # no fallback: a broken `run --record` fails the tests that use these runs
    assert res.returncode == 0, res.stderr
    docs = read_jsonl(res.stdout)
    samples = [d for d in docs if d.get("schema") == "pgparmon.sample/1"]
    summary = [d for d in docs if d.get("schema") == "pgparmon.summary/1"]
    assert samples and len(summary) == 1, res.stdout[-2000:]
    assert rec.exists(), f"`pgparmon run --record {rec}` wrote no recording"
    recording = read_recording(str(rec))
    assert not recording.truncated and recording.samples == samples, \
        "the recording does not hold the samples the run printed"
    return JobRun(samples, summary[0], rec)


def dump_run(cluster: Cluster, sample_db: str) -> JobRun:
    key = (cluster.port, "dump")
    if key not in _cache:
        out = _tmp() / "dump"
        shutil.rmtree(out, ignore_errors=True)
        _cache[key] = _run(cluster, [cluster.client("pg_dump"), "-Fd", "-j", "2", "-f",
                                     str(out), sample_db], _tmp() / "dump.rec.gz")
    return _cache[key]


def restore_run(cluster: Cluster, dump_archive: Path) -> JobRun:
    key = (cluster.port, "restore")
    if key not in _cache:
        cluster.psql("DROP DATABASE IF EXISTS restored_tui")
        cluster.psql("CREATE DATABASE restored_tui")
        _cache[key] = _run(cluster, [cluster.client("pg_restore"), "-j", "2", "-d",
                                     "restored_tui", str(dump_archive)],
                           _tmp() / "restore.rec.gz")
    return _cache[key]


def golden(name: str) -> list[dict[str, Any]]:
    """Fixed docs (cut from real runs) for deterministic snapshots."""
    with open(GOLDEN / f"{name}.json", encoding="utf-8") as f:
        docs: list[dict[str, Any]] = json.load(f)
    return docs
