"""Golden tests of the Monitor on recorded streams (pgcenter-style).

tests/golden/monitor/*.rec.gz are recordings of a real `pg_dump -Fd -j 2` and
a real `pg_restore -j 2` of a small database, written by `pgparmon run
--record` (regenerate them with tests/golden/monitor/make.py). Each one is
replayed through the Monitor from a ReplaySource, with no server (connecting
fails the test), and what the analysis derives is compared with
NAME.expected.json: per sample the state, progress, ETA, items done, active
workers, bottleneck verdict and warning codes; the last published sample in
full; the end summary (outcome, item list with workers and timings).

Every value in the expected files comes from the recording itself (its wall
clock, pids, paths, host readings), so a replay is the same on any machine.

After an intended change of the analysis, rewrite the expected files and
review their diff:

    PYTHONPATH=. python -m pytest -q tests/test_golden.py --update-golden
    # or PGPARMON_UPDATE_GOLDEN=1 PYTHONPATH=. python -m pytest -q tests/test_golden.py
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support import monitor_replay

from pgparmon.monitor import Monitor
from pgparmon.record import read_recording

GOLDEN = Path(__file__).parent / "golden" / "monitor"
RECORDINGS = sorted(p.name[: -len(".rec.gz")] for p in GOLDEN.glob("*.rec.gz"))
# the password make.py puts on the pg_dump / pg_restore command lines
SECRET = b"golden-secret-pw"
MAX_RECORDING_BYTES = 80_000


def _no_server(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a replay must not connect to a server")


def replay(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any], Monitor]:
    """Every sample the Monitor derives from the recording, and its summary."""
    assert not read_recording(str(path)).truncated, \
        f"{path.name} is cut short: regenerate it with make.py"
    return monitor_replay(path)


def _row(i: int, s: dict[str, Any]) -> dict[str, Any]:
    j = s["job"]
    return {"i": i, "elapsed_s": s["elapsed_s"], "state": j["state"], "progress": j["progress"],
            "eta_s": j["eta_s"], "eta_reason": j["eta_reason"], "items_done": j["items_done"],
            "items_total": j["items_total"], "active_workers": j["active_workers"],
            "bottleneck": s["bottleneck"]["kind"],
            "warnings": [w["code"] for w in s["warnings"]]}


def facts(samples: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
    """What the golden file pins of one replay."""
    verdicts: list[list[Any]] = []  # [kind, first sample, last sample], in order
    for i, s in enumerate(samples):
        kind = s["bottleneck"]["kind"]
        if verdicts and verdicts[-1][0] == kind:
            verdicts[-1][2] = i
        else:
            verdicts.append([kind, i, i])
    first_eta = next((i for i, s in enumerate(samples) if s["job"]["eta_s"] is not None
                      and s["job"]["state"] == "running"), None)
    return {
        "samples": len(samples),
        "outcome": {k: samples[-1]["job"].get(k) for k in ("state", "outcome", "exit_code")},
        "first_eta_sample": first_eta,
        "verdicts": verdicts,
        "items": [[it["name"], it["kind"], it["state"], it["worker"]]
                  for it in summary["items"]],
        "timeline": [_row(i, s) for i, s in enumerate(samples)],
        "last_sample": samples[-1],
        "summary": summary,
    }


def dumps(doc: dict[str, Any]) -> str:
    """Indented JSON, one line per timeline row and per item: readable diffs."""
    parts = []
    for k, v in doc.items():
        if k in ("timeline", "items", "verdicts"):
            rows = ",\n".join("  " + json.dumps(r) for r in v)
            parts.append(f" {json.dumps(k)}: [\n{rows}\n ]")
        else:
            body = json.dumps(v, indent=1, sort_keys=True).replace("\n", "\n ")
            parts.append(f" {json.dumps(k)}: {body}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def test_there_are_recordings() -> None:
    assert {"dump_fd_j2", "restore_j2"} <= set(RECORDINGS)


@pytest.mark.parametrize("name", RECORDINGS)
def test_monitor_replay_matches_golden(name: str, update_golden: bool,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(psycopg, "connect", _no_server)
    monkeypatch.setattr(psycopg.Connection, "connect", _no_server)
    samples, summary, _ = replay(GOLDEN / f"{name}.rec.gz")
    got = facts(samples, summary)
    expected_path = GOLDEN / f"{name}.expected.json"
    if update_golden:
        expected_path.write_text(dumps(got), encoding="utf-8")
    assert expected_path.exists(), (f"no {expected_path.name}: run with --update-golden "
                                    "(or PGPARMON_UPDATE_GOLDEN=1) to write it")
    expected = json.loads(expected_path.read_text(encoding="utf-8"))
    # compare the readable parts first: a failure then names what moved
    for key in ("samples", "outcome", "first_eta_sample", "verdicts", "items", "timeline"):
        assert got[key] == expected[key], key
    assert got == expected


@pytest.mark.parametrize("name", RECORDINGS)
def test_replay_is_deterministic(name: str) -> None:
    a = replay(GOLDEN / f"{name}.rec.gz")[:2]
    b = replay(GOLDEN / f"{name}.rec.gz")[:2]
    assert a == b


@pytest.mark.parametrize("name", RECORDINGS)
def test_recording_is_small_and_has_no_password(name: str) -> None:
    path = GOLDEN / f"{name}.rec.gz"
    assert path.stat().st_size <= MAX_RECORDING_BYTES
    raw = gzip.decompress(path.read_bytes())
    assert SECRET not in raw
    # make.py gives the client a conninfo password: the recording shows it masked
    assert b"password=********" in raw
    assert not re.search(rb"password=(?!\*{8})", raw, re.IGNORECASE)


@pytest.mark.parametrize("name", RECORDINGS)
def test_recording_ends_with_the_job(name: str) -> None:
    """A recording ends where the live run ended: the replay reaches an
    outcome on the last snapshot, and agrees with the summary recorded live."""
    rec = read_recording(str(GOLDEN / f"{name}.rec.gz"))
    samples, summary, mon = replay(GOLDEN / f"{name}.rec.gz")
    assert mon.outcome is not None and mon.outcome.state == "finished"
    assert len(samples) == sum(1 for k, _ in rec.events if k == "snapshot")
    assert rec.summary is not None and rec.summary["state"] == summary["state"]
