"""The plan's reading goes on beside the samples when it is slow
(source.LiveSource.plan_inputs): an archive of a million large objects is a
million TOC lines, seconds of reading in which no sample was taken."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from pgparmon import source as src
from pgparmon.jobs.base import Job, PlanInputs


def _source(read: Any) -> src.LiveSource:
    s = src.LiveSource.__new__(src.LiveSource)  # no server: the reading is stubbed
    s.job = Job(kind="pg_restore", database="db")
    s.target_dir = None
    s._planning = None
    s._root_gone = False
    s._read_plan = read  # type: ignore[method-assign]
    return s


def test_a_quick_reading_is_handed_over_at_once() -> None:
    s = _source(lambda req: PlanInputs(note=f"read {req}"))
    got = s.plan_inputs({"a": 1})
    assert got is not None and got.note == "read {'a': 1}"
    # not written yet: None, and the next call reads again
    s._read_plan = lambda req: None  # type: ignore[method-assign]
    assert s.plan_inputs() is None and s._planning is None


def test_a_slow_reading_goes_on_while_the_samples_do() -> None:
    release = threading.Event()
    calls = []

    def slow(req: dict[str, Any]) -> PlanInputs:
        calls.append(req)
        release.wait(10)
        return PlanInputs(note="the plan")

    s = _source(slow)
    t0 = time.monotonic()
    assert s.plan_inputs({"n": 1}) is None  # after PLAN_WAIT_S, not the reading's end
    assert s.plan_inputs({"n": 2}) is None  # still reading: not read twice
    assert time.monotonic() - t0 < 5 and calls == [{"n": 1}]
    release.set()
    deadline = time.monotonic() + 10
    got = None
    while got is None and time.monotonic() < deadline:
        got = s.plan_inputs({"n": 3})
    assert got is not None and got.note == "the plan" and calls == [{"n": 1}]


def test_a_reading_that_fails_fails_in_the_caller() -> None:
    def broken(req: dict[str, Any]) -> PlanInputs:
        raise ValueError("unreadable")

    s = _source(broken)
    with pytest.raises(ValueError, match="unreadable"):
        for _ in range(40):
            s.plan_inputs()


def test_once_the_job_is_gone_its_plan_is_waited_for() -> None:
    """The end's figures (items done of how many) need the plan: a reading
    still going on when the job's leader is gone is waited for."""
    def slow(req: dict[str, Any]) -> PlanInputs:
        time.sleep(1.0)
        return PlanInputs(note="the plan")

    s = _source(slow)
    assert s.plan_inputs() is None
    s._root_gone = True  # the next snapshot saw the leader gone
    got = s.plan_inputs()
    assert got is not None and got.note == "the plan"


def test_a_step_followed_mid_reading_gets_its_own_plan() -> None:
    """A job in steps: the reading asked for the last step is still going
    on when the next step is followed; the next call reads for the new
    step, with its own request, not the last one's result."""
    release = threading.Event()
    calls: list[dict[str, Any]] = []

    def read(req: dict[str, Any]) -> PlanInputs:
        calls.append(req)
        if len(calls) == 1:
            release.wait(10)
        return PlanInputs(note=f"plan for {req}")

    s = _source(read)
    s.known_backends = set()
    s.process = None
    s.log = None
    assert s.plan_inputs({"step": 1}) is None  # step 1's reading goes on
    s.follow_step(Job(kind="pg_restore", database="db", step=2))
    got = None
    deadline = time.monotonic() + 10
    while got is None and time.monotonic() < deadline:
        got = s.plan_inputs({"step": 2})
    release.set()
    assert got is not None and got.note == "plan for {'step': 2}"
    assert calls == [{"step": 1}, {"step": 2}]


def test_a_plan_asked_while_the_connection_is_down_is_asked_again() -> None:
    """A dump's plan reads the catalog: with the monitor's connection down
    (the samples reconnect) it is not ready yet, not a failed plan (nor
    an AssertionError out of the sample loop, as before)."""
    from pgparmon.readers.db import DbSampler

    s = src.LiveSource.__new__(src.LiveSource)
    s.job = Job(kind="pg_dump", database="db")
    s.target_dir = None
    s.sampler = DbSampler.__new__(DbSampler)
    s.sampler.conn = None
    s.sampler.facts = None
    assert s._read_plan({}) is None
