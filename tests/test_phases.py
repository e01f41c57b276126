"""The worker phase registry (pgparmon.phases): the SQL sessions' phases and
the drivers', one definition each, read by the timeline, the monitor, the
TUI, the report and the exporter."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import monitor_replay

from pgparmon import phases
from pgparmon.analyze.timeline import TimelineBuilder
from pgparmon.jobs.registry import all_phases, drivers, phase_of
from pgparmon.sample import Sample
from pgparmon.tui.draw import legend

GOLDEN = Path(__file__).parent / "golden"
RECORDINGS = sorted(GOLDEN.glob("*/*.rec.gz"))


def test_every_driver_phase_is_registered_once() -> None:
    names = [p.name for p in all_phases()]
    assert len(names) == len(set(names))
    for d in drivers():
        for p in d.phases:
            assert phase_of(p.name) is p or phase_of(p.name) == p, (d.kind, p.name)
    # a pgBackRest restore's rows (the tables once missed them)
    assert phase_of("restore").busy and phase_of("restore").streams
    assert phase_of("finishing").busy and phase_of("finishing").waits


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.parent.name + "/" + p.name)
def test_the_recorded_workers_phases_are_all_registered(path: Path) -> None:
    samples, _, _ = monitor_replay(path)
    seen = {w["phase"] for s in samples for w in s.get("workers") or ()}
    assert seen, path
    known = {p.name for p in all_phases()}
    assert seen <= known, seen - known


def test_a_phase_is_registered_one_way() -> None:
    copy = phase_of("copy")
    phases.register(copy)  # the same definition again: no change
    assert phase_of("copy") is copy
    with pytest.raises(ValueError, match="'copy'"):
        phases.register(phases.Phase("copy", 10))
    assert phase_of("copy") is copy


def test_an_unknown_phase_is_no_work_and_not_drawn() -> None:
    p = phase_of("no-such-phase")
    assert not (p.busy or p.streams or p.waits) and p.tui is None and p.fill is None


def test_a_new_phase_makes_spans_and_a_legend_entry() -> None:
    mine = phases.Phase("toy-copy", 5, busy=True, streams=True, tui=("black on red", "black on blue"))
    phases.register(mine)
    try:
        tl = TimelineBuilder()
        for t, ph in ((0.0, "toy-copy"), (1.0, "toy-copy"), (2.0, "idle")):
            tl.add(Sample.from_json({"elapsed_s": t, "job": {}, "workers": [
                {"pid": 1, "phase": ph, "item": "x" if ph == "toy-copy" else None}]}))
        spans = tl.spans()
        assert [(s.item, s.phase, s.start, s.end) for s in spans[1]] == [("x", "toy-copy", 0.0, 2.0)]
        assert mine.tui_block == ("red", "blue")
        # a tool's timeline: its own phases only, none of a load's
        assert legend({"toy-copy"}) == [("toy-copy", "black on red")]
    finally:
        phases._PHASES.pop("toy-copy")


def test_a_loads_legend_and_a_backups() -> None:
    assert [label for label, _ in legend({"copy"})] == ["copy", "index", "constraint", "lock-wait"]
    assert [label for label, _ in legend({"copy", "analyze"})][-1] == "vacuum/analyze"
    assert [label for label, _ in legend({"starting", "backup", "archive-wait"})] == [
        "backup", "starting", "archive-wait"]


def _advice(kind: str) -> tuple[str, str, str]:
    from pgparmon.analyze.advice_live import AdviceTracker

    a = AdviceTracker()
    a.add(Sample.from_json({"elapsed_s": 1.0, "job": {"kind": kind, "jobs": 2,
                                                     "state": "running"}, "workers": []}))
    r = a.advice()
    return r.status, r.headline, r.detail


def test_the_advice_speaks_each_drivers_words() -> None:
    # the driver's advice_terms and no_jobs_advice, not a kind check in the analysis
    status, head, detail = _advice("pgbackrest")
    assert "file copy" in head + detail and "COPY" not in head + detail
    assert _advice("pgbackrest-restore")[1] == head
    assert "COPY" in _advice("pg_dump")[1]
    status, head, _ = _advice("pg_basebackup")
    assert status == "single" and "no -j to choose" in head
    assert _advice("no-such-kind")[0] == _advice("pg_dump")[0]  # an old recording's unknown kind
