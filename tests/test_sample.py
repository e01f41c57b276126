"""Typed samples (pgparmon/sample.py) and pgparmon.sample/1 (docs/json.md).

Every sample of every recorded stream kept in tests/ (the golden
recordings of tests/golden/*/, the TUI's golden samples, the golden
monitor files' last samples) is read back into a `Sample` and written out
again: the same document, key order included, so that JSON Lines and
recordings stay byte for byte what they were. The recordings span the
schema's history (samples without `job.started`, `workers[].direction`,
`host.mem_used_percent` or `warnings`): an older sample reads back with
those as None and writes out without them. What the Monitor builds
survives the trip the other way (to_json, then from_json: the same typed
sample), and what it writes is what the golden tests pin.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from support import monitor_replay

from pgparmon.playback import derive_all
from pgparmon.record import read_recording
from pgparmon.sample import SCHEMA, Sample, SampleError, read_samples

GOLDEN = Path(__file__).parent / "golden"
RECORDINGS = sorted(GOLDEN.glob("*/*.rec.gz"))
TUI_DOCS = sorted((GOLDEN / "tui").glob("*.json"))


def _recorded(path: Path) -> list[Any]:
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            ev = json.loads(line)
            if ev["t"] == "sample":
                out.append(ev["v"])
    return out


def _lines(docs: list[Any]) -> list[str]:
    return [json.dumps(d, separators=(",", ":")) for d in docs]


def test_there_are_streams_of_every_age() -> None:
    docs = [d for p in RECORDINGS for d in _recorded(p)]
    assert len(RECORDINGS) >= 8 and len(docs) >= 100
    docs += [d for p in TUI_DOCS for d in json.loads(p.read_text(encoding="utf-8"))
             if d.get("schema") == SCHEMA]
    # the old and the new shapes are both here: the round trip covers both
    assert any("started" not in d["job"] for d in docs)
    assert any("started" in d["job"] for d in docs)
    assert any("warnings" not in d for d in docs)
    assert any(w and "direction" not in w[0] for w in (d["workers"] for d in docs))
    assert any("backup" in d["job"] for d in docs)


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_recorded_sample_round_trips(path: Path) -> None:
    docs = _recorded(path)
    assert docs
    back = [s.to_json() for s in read_samples(docs)]
    assert back == docs
    assert _lines(back) == _lines(docs)  # the bytes a recording and --json write


@pytest.mark.parametrize("path", TUI_DOCS, ids=lambda p: p.name)
def test_every_golden_tui_sample_round_trips(path: Path) -> None:
    docs = [d for d in json.loads(path.read_text(encoding="utf-8"))
            if d.get("schema") == SCHEMA]
    assert docs
    back = [Sample.from_json(d).to_json() for d in docs]
    assert _lines(back) == _lines(docs)


@pytest.mark.parametrize("path", sorted((GOLDEN / "monitor").glob("*.expected.json")),
                         ids=lambda p: p.name)
def test_golden_last_samples_round_trip(path: Path) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))["last_sample"]
    assert Sample.from_json(doc).to_json() == doc


def _typed_replay(path: Path) -> list[Sample]:
    return derive_all(str(path))[0]


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_what_the_monitor_builds_survives_its_document(path: Path) -> None:
    samples = _typed_replay(path)
    assert samples and all(isinstance(s, Sample) for s in samples)
    docs = [s.to_json() for s in samples]
    # written out and read back: the same typed sample, field by field
    assert [Sample.from_json(json.loads(line)) for line in _lines(docs)] == samples
    # and the document is the one the replay helpers (and the golden tests) see
    assert docs == monitor_replay(path)[0]
    assert [list(d) for d in docs] == [list(d) for d in monitor_replay(path)[0]]


def test_an_older_sample_reads_as_none_and_writes_as_it_was() -> None:
    old = {"schema": SCHEMA, "ts": "2025-01-01T00:00:00.000+00:00", "elapsed_s": 1.0,
           "job": {"kind": "pg_dump", "state": "running", "client_pid": 7, "jobs": 2,
                   "format": "directory", "target": "/x", "database": "d",
                   "command": ["pg_dump"], "progress": None, "eta_s": None,
                   "eta_reason": "measuring", "last_item": None, "bytes_per_s": 0.0,
                   "tuples_per_s": 0.0, "items_total": 0, "items_done": 0,
                   "active_workers": 1},
           "workers": [{"pid": 9, "client_pid": 7, "phase": "copy", "relation": "t",
                        "item": "t", "bytes_done": 5, "tuples_done": 1,
                        "bytes_per_s": None, "tuples_per_s": None, "progress": None,
                        "wait_event": None, "blocked_by": [], "client_cpu_percent": None,
                        "server_cpu_percent": None, "later": {"a": 1}}],
           "host": {"cpu_percent": None, "per_cpu": [], "iowait_percent": None, "disks": {}},
           "bottleneck": {"kind": "starting", "detail": "first sample"},
           "server": {"latency_ms": 1.0, "error": None, "version": "15.1"},
           "free_bytes": None, "notes": []}
    s = Sample.from_json(old)
    assert s.job.started is None and s.job.grouping is None and s.job.databases == ()
    assert s.job.ending is None and s.job.outcome is None and s.job.phase is None
    assert s.workers[0].direction is None and s.workers[0].query is None
    assert s.workers[0].extra == {"later": {"a": 1}}  # a key this version does not know
    assert s.warnings == () and "warnings" in s.missing
    assert s.host.mem_used_percent is None
    assert _lines([s.to_json()]) == _lines([old])


def test_an_ended_job_keeps_its_outcome_and_its_kind_fields_in_order() -> None:
    job = {"kind": "copy", "state": "failed", "client_pid": None, "started": None,
           "started_from": "sessions", "jobs": 2, "format": None, "target": None,
           "database": "d", "command": [], "progress": 0.5, "eta_s": None,
           "eta_reason": None, "last_item": None, "bytes_per_s": 0.0, "tuples_per_s": 0.0,
           "items_total": 2, "items_done": 1, "active_workers": 0, "grouping": "g",
           "databases": ["d"], "client_pids": [], "phase": None,
           "progress_basis": "unknown", "source": None, "copies_done": 1,
           "outcome": "exit code 1", "exit_code": 1}
    s = Sample.from_json({"job": job})
    assert list(s.job.kind_fields) == ["phase", "progress_basis", "source", "copies_done"]
    assert s.job.outcome == "exit code 1" and s.job.exit_code == 1 and s.ended
    assert s.job.progress_basis == "unknown" and not s.job.host_only
    assert list(s.job.to_json()) == list(job)
    assert s.to_json() == {"job": job}  # a partial document stays partial


@pytest.mark.parametrize("doc, says", [
    ([], "not an object"),
    ({"schema": "pgparmon.summary/1"}, "schema"),
    ({"job": ["pg_dump"]}, "job is a list"),
    ({"workers": {"pid": 1}}, "workers is a dict"),
    ({"workers": [{"phase": "copy"}]}, "no pid"),
    ({"host": {"disks": [1]}}, "host.disks"),
    ({"warnings": ["disk-full"]}, "a warning"),
])
def test_a_document_that_is_no_sample_says_what(doc: Any, says: str) -> None:
    with pytest.raises(SampleError, match=says):
        Sample.from_json(doc)


def test_report_of_a_recording_whose_sample_is_no_sample_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A recording is read back through from_json at its edge: a sample
    that is not one (its workers an object) is one line and exit 2, not a
    traceback; the same recording with the sample whole is reported."""
    from pgparmon.playback import report_command
    from pgparmon.record import Recorder

    good = _recorded(GOLDEN / "monitor" / "dump_fd_j2.rec.gz")
    header = read_recording(str(GOLDEN / "monitor" / "dump_fd_j2.rec.gz")).header
    for name, bad in (("ok", None), ("bad", {"pid": 1})):
        rec = Recorder(str(tmp_path / f"{name}.rec.gz"))
        rec.header({k: v for k, v in header.items() if k not in ("schema", "created")})
        for doc in good:
            rec.event("sample", dict(doc, workers=bad) if bad is not None else doc)
        rec.close()
    assert report_command(str(tmp_path / "ok.rec.gz"), None) == 0
    capsys.readouterr()
    assert report_command(str(tmp_path / "bad.rec.gz"), None) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "workers is a dict" in err and "Traceback" not in err
