"""pgparmon.analyze.schedule: hand-computed schedules of pg_dump / pg_restore
-j, and properties of the simulation (hypothesis)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgparmon.analyze.schedule import (
    Helpers,
    RateFn,
    Schedule,
    Span,
    WorkItem,
    lower_bound,
    simulate,
)


def const(v: float = 1.0) -> RateFn:
    return lambda k: v


def dump_items(works: Sequence[float]) -> list[WorkItem]:
    # pg_dump orders by size; here size = work, like relpages.
    return [WorkItem(key=f"t{i}", work=float(w), size=float(w)) for i, w in enumerate(works)]


def by_key(s: Schedule) -> dict[str, Span]:
    return {sp.key: sp for sp in s.spans}


# ---- hand-computed cases ---------------------------------------------------


def test_lpt_is_not_optimal_here() -> None:
    # 2 workers, [3,3,2,2,2]: LPT puts 3|3, then 2|2, then the last 2 -> 7;
    # the optimum is 3+3 | 2+2+2 = 6. Graham's bound 4/3 - 1/6 is met exactly.
    s = simulate(dump_items([3, 3, 2, 2, 2]), 2, const())
    assert s.makespan == 7.0
    assert lower_bound(dump_items([3, 3, 2, 2, 2]), 2, const()) == 6.0
    sp = by_key(s)
    assert (sp["t0"].worker, sp["t0"].start, sp["t0"].end) == (0, 0.0, 3.0)
    assert (sp["t1"].worker, sp["t1"].start, sp["t1"].end) == (1, 0.0, 3.0)
    assert (sp["t2"].worker, sp["t2"].start) == (0, 3.0)
    assert (sp["t3"].worker, sp["t3"].start) == (1, 3.0)
    assert (sp["t4"].worker, sp["t4"].start, sp["t4"].end) == (0, 5.0, 7.0)
    assert s.last_item == "t4"
    # after the last start (t=5) only one stream is busy: 2 s of tail
    assert s.tail_s == 2.0
    assert s.busy_profile == ((0.0, 2), (5.0, 1), (7.0, 0))


def test_largest_first_ties_in_input_order() -> None:
    items = [WorkItem("a", 1, 5), WorkItem("b", 1, 9), WorkItem("c", 1, 5), WorkItem("d", 1, 9)]
    s = simulate(items, 1, const())
    assert [sp.key for sp in s.spans] == ["b", "d", "a", "c"]


def test_one_huge_table_gives_a_long_tail() -> None:
    items = dump_items([100] + [1] * 10)
    s = simulate(items, 4, const())
    # the huge one starts first and runs alone once the smalls are gone:
    # 3 workers take the 10 smalls at t=0,1,2,3, the last ends at t=4.
    assert s.makespan == 100.0
    assert s.last_item == "t0"
    assert max(sp.start for sp in s.spans) == 3.0
    # from t=3 (last start) only 2 streams, then 1: everything after is tail
    assert s.tail_s == 97.0
    assert s.busy_profile == ((0.0, 4), (3.0, 2), (4.0, 1), (100.0, 0))
    assert lower_bound(items, 4, const()) == 100.0


def test_rates_that_fall_with_k() -> None:
    # r(1) = 10, r(2) = 6 per stream (total 12/s). [30, 12] on 2 workers:
    # both at 6/s; the 12 ends at t=2 with 18 of the 30 left, which then runs
    # alone at 10/s: 1.8 s more. Makespan 3.8 (a constant 10/s would give 3).
    rate = {1: 10.0, 2: 6.0}.__getitem__
    s = simulate(dump_items([30, 12]), 2, rate)
    assert s.makespan == pytest.approx(3.8, abs=1e-12)
    assert by_key(s)["t1"].end == pytest.approx(2.0)
    assert s.busy_profile[1] == (pytest.approx(2.0), 1)
    assert simulate(dump_items([30, 12]), 2, const(10.0)).makespan == 3.0
    # one worker: 42 units at 10/s
    assert simulate(dump_items([30, 12]), 1, rate).makespan == pytest.approx(4.2)


def test_rate_changes_as_streams_come_and_go() -> None:
    # r(k) = 12/k (total throughput flat at 12/s). Three items of 12 with 2
    # workers: 0-2 s two streams at 6/s finish two; 2-3 s one alone at 12/s.
    s = simulate(dump_items([12, 12, 12]), 2, lambda k: 12.0 / k)
    assert s.makespan == pytest.approx(3.0)
    assert s.busy_profile == ((0.0, 2), (pytest.approx(2.0), 1), (pytest.approx(3.0), 0))


def test_restore_indexes_wait_for_data_and_constraints_take_turns() -> None:
    # table A: data 10, two indexes (3 each, may overlap), a primary key and a
    # foreign key (2 each, exclusive on A: one at a time); table B: data 4.
    items = [
        WorkItem("dataA", 10, 10, table="A"),
        WorkItem("dataB", 4, 4, table="B"),
        WorkItem("idxA1", 3, 10, table="A", deps=frozenset({"dataA"})),
        WorkItem("idxA2", 3, 10, table="A", deps=frozenset({"dataA"})),
        WorkItem("pkA", 2, 10, table="A", exclusive=True, deps=frozenset({"dataA"})),
        WorkItem("fkA", 2, 10, table="A", exclusive=True, deps=frozenset({"dataA"})),
    ]
    s = simulate(items, 4, const())
    sp = by_key(s)
    assert sp["dataA"].start == 0.0 and sp["dataB"].start == 0.0
    for k in ("idxA1", "idxA2", "pkA"):
        assert sp[k].start == 10.0
    # both indexes of A run at once
    assert sp["idxA1"].end == sp["idxA2"].end == 13.0
    # the foreign key waits for the primary key's lock although a worker is idle
    assert sp["fkA"].start == 12.0 and sp["fkA"].end == 14.0
    assert s.makespan == 14.0
    assert s.last_item == "fkA"
    assert s.unschedulable == ()
    # last start at 12 with 3 busy of 4: tail from 12
    assert s.tail_s == 2.0


def test_exclusive_on_other_tables_do_not_conflict() -> None:
    items = [WorkItem("pkA", 2, 1, table="A", exclusive=True),
             WorkItem("pkB", 2, 1, table="B", exclusive=True),
             WorkItem("x", 2, 1, table=None, exclusive=True)]
    s = simulate(items, 3, const())
    assert s.makespan == 2.0


def test_blocked_by_a_running_exclusive_item() -> None:
    running = [WorkItem("pkA", 5, 1, table="A", exclusive=True)]
    pending = [WorkItem("fkA", 1, 1, table="A", exclusive=True),
               WorkItem("idx", 1, 1, table="A")]
    s = simulate(pending, 2, const(), running=running, now=100.0)
    sp = by_key(s)
    assert sp["pkA"].start == 100.0 and sp["pkA"].worker == 0
    assert sp["idx"].start == 100.0  # an index on A does not wait for the lock
    assert sp["fkA"].start == 105.0
    assert s.makespan == 6.0


def test_deps_on_missing_keys_count_as_done() -> None:
    items = [WorkItem("idx", 2, 1, deps=frozenset({"data-done-long-ago"}))]
    s = simulate(items, 2, const())
    assert s.makespan == 2.0 and s.unschedulable == ()


def test_deps_on_running_items_wait() -> None:
    running = [WorkItem("data", 4, 9)]
    pending = [WorkItem("idx", 1, 9, deps=frozenset({"data"})), WorkItem("other", 1, 1)]
    s = simulate(pending, 4, const(), running=running)
    sp = by_key(s)
    assert sp["other"].start == 0.0
    assert sp["idx"].start == 4.0 and s.makespan == 5.0


def test_cycles_are_reported_not_looped() -> None:
    items = [
        WorkItem("a", 1, 1, deps=frozenset({"b"})),
        WorkItem("b", 1, 1, deps=frozenset({"a"})),
        WorkItem("c", 1, 1, deps=frozenset({"a"})),
        WorkItem("self", 1, 1, deps=frozenset({"self"})),
        WorkItem("d", 3, 1),
    ]
    s = simulate(items, 2, const())
    assert s.unschedulable == ("a", "b", "c", "self")
    assert [sp.key for sp in s.spans] == ["d"]
    assert s.makespan == 3.0


def test_nothing_schedulable_at_all() -> None:
    s = simulate([WorkItem("a", 1, 1, deps=frozenset({"a"}))], 2, const())
    assert s.makespan == 0.0 and s.spans == () and s.last_item is None
    assert s.unschedulable == ("a",) and s.busy_profile == ()


def test_zero_work_items_finish_at_once() -> None:
    items = [WorkItem("big", 5, 5), WorkItem("acl", 0, 0, deps=frozenset({"big"})),
             WorkItem("z", 0, 9)]
    s = simulate(items, 1, const())
    sp = by_key(s)
    assert (sp["z"].start, sp["z"].end) == (0.0, 0.0)
    assert (sp["acl"].start, sp["acl"].end) == (5.0, 5.0)
    assert s.makespan == 5.0
    assert s.last_item == "big"  # not the instantaneous ACL ending with it
    assert s.busy_profile == ((0.0, 1), (5.0, 0))


def test_overfull_running_all_run() -> None:
    running = [WorkItem(f"r{i}", 2 + i, 1) for i in range(3)]  # ends 2, 3, 4
    pending = [WorkItem("p", 1, 1)]
    s = simulate(pending, 2, const(), running=running)
    sp = by_key(s)
    assert [sp[f"r{i}"].worker for i in range(3)] == [0, 1, 2]
    # r0 ends at 2, but 2 are still active: p waits for r1 at 3
    assert sp["p"].start == 3.0 and sp["p"].worker in (0, 1)
    assert s.makespan == 4.0
    assert s.busy_profile == ((0.0, 3), (2.0, 2), (4.0, 0))


def test_nothing_to_do() -> None:
    s = simulate([], 4, const())
    assert s == Schedule(0.0, (), None, 0.0, (), ())
    assert lower_bound([], 4, const()) == 0.0


def test_bad_input_raises() -> None:
    with pytest.raises(ValueError):
        simulate(dump_items([1]), 1, const(0.0))
    with pytest.raises(ValueError):
        simulate(dump_items([1, 1]), 2, lambda k: 1.0 if k == 1 else -1.0)
    with pytest.raises(ValueError):
        simulate(dump_items([1]), 0, const())
    with pytest.raises(ValueError):
        simulate([WorkItem("a", 1, 1), WorkItem("a", 2, 2)], 1, const())
    with pytest.raises(ValueError):
        WorkItem("a", -1, 1)
    with pytest.raises(ValueError):
        WorkItem("a", math.nan, 1)
    with pytest.raises(ValueError):
        lower_bound(dump_items([1]), 1, const(0.0))


def test_lower_bound_formula() -> None:
    # max(max work / r(1), sum / (w_eff * r(w_eff))), w_eff = min(workers, n)
    rate = {1: 10.0, 2: 8.0, 3: 5.0}.__getitem__
    assert lower_bound(dump_items([20, 20]), 8, rate) == pytest.approx(40 / 16)
    assert lower_bound(dump_items([50, 1, 1]), 3, rate) == pytest.approx(5.0)
    assert lower_bound(dump_items([10, 10, 10]), 3, rate) == pytest.approx(30 / 15)


def test_five_thousand_items_sixteen_workers_runs() -> None:
    # No timing assertion (timings belong to benchmarks): this just has to
    # finish, and a quadratic simulation would make the test file crawl.
    items = []
    for i in range(5000):
        table = f"t{i // 5}"
        w = float((i * 7919) % 1000 + 1)
        if i % 5 == 0:
            items.append(WorkItem(f"data{i}", w, w, table=table))
        else:
            items.append(WorkItem(f"post{i}", w / 10, w, table=table, exclusive=i % 5 >= 3,
                                  deps=frozenset({f"data{i - i % 5}"})))
    s = simulate(items, 16, lambda k: 100.0 / (1 + 0.05 * (k - 1)))
    assert len(s.spans) == 5000 and s.unschedulable == ()


# ---- properties --------------------------------------------------------------


@st.composite
def restore_like(draw: st.DrawFn, allow_cycles: bool = False) -> list[WorkItem]:
    n = draw(st.integers(0, 14))
    items: list[WorkItem] = []
    for i in range(n):
        if allow_cycles:
            deps = draw(st.frozensets(st.integers(0, n + 1), max_size=2))
        else:
            deps = draw(st.frozensets(st.integers(0, i - 1), max_size=2)) if i else frozenset()
        items.append(WorkItem(
            key=f"k{i}",
            work=float(draw(st.integers(0, 20))),
            size=float(draw(st.integers(0, 5))),
            table=draw(st.sampled_from([None, "A", "B"])),
            exclusive=draw(st.booleans()),
            deps=frozenset(f"k{d}" for d in deps),
            # pg_restore's lock rule over the tables an entry depends on
            tables=draw(st.frozensets(st.sampled_from(["A", "B", "C"]), max_size=2)),
        ))
    return items


def check_invariants(items: Sequence[WorkItem], s: Schedule, workers: int,
                     running: Sequence[WorkItem] = (), now: float = 0.0) -> None:
    all_items = [*running, *items]
    keys = [sp.key for sp in s.spans] + list(s.unschedulable)
    assert sorted(keys) == sorted(it.key for it in all_items)  # each exactly once
    sp = by_key(s)
    item = {it.key: it for it in all_items}
    # one worker runs one item at a time
    by_worker: dict[int, list[Span]] = {}
    for x in s.spans:
        by_worker.setdefault(x.worker, []).append(x)
    for spans in by_worker.values():
        spans.sort(key=lambda x: (x.start, x.end))
        for a, b in itertools.pairwise(spans):
            assert b.start >= a.end
    # never more than `workers` at once (unless running over-fills)
    real = [x for x in s.spans if x.end > x.start]
    for x in real:
        busy = sum(1 for y in real if y.start <= x.start < y.end)
        assert busy <= max(workers, len(running))
    # exclusive items on one table never overlap
    excl = [x for x in real if item[x.key].exclusive and item[x.key].table is not None
            and not item[x.key].tables]
    for a, b in itertools.combinations(excl, 2):
        if item[a.key].table == item[b.key].table:
            assert a.end <= b.start or b.end <= a.start
    # an exclusive item and any item naming one of its tables never overlap
    # (items running at `now` were not handed out by the scheduler)
    started = {r.key for r in running}
    for a, b in itertools.combinations(real, 2):
        ia, ib = item[a.key], item[b.key]
        if a.key in started or b.key in started or not (ia.exclusive or ib.exclusive):
            continue
        if ia.lock_tables & ib.lock_tables:
            assert a.end <= b.start or b.end <= a.start, (a, b)
    # dependencies finish first
    for x in s.spans:
        for d in item[x.key].deps:
            if d in sp and x.key not in {r.key for r in running}:
                assert x.start >= sp[d].end
    # each item got exactly its work, at the rate its moment's stream count gave
    # (checked in the rate-varying property below); makespan = last end
    if s.spans:
        assert now + s.makespan == pytest.approx(max(x.end for x in s.spans))
        assert s.last_item is not None and sp[s.last_item].end == pytest.approx(now + s.makespan)
    assert 0.0 <= s.tail_s <= s.makespan + 1e-9


@settings(max_examples=150, deadline=None)
@given(restore_like(), st.integers(1, 5))
def test_acyclic_everything_runs_and_invariants_hold(items: list[WorkItem], workers: int) -> None:
    s = simulate(items, workers, const(2.0))
    assert s.unschedulable == ()
    check_invariants(items, s, workers)
    assert s.makespan >= lower_bound(items, workers, const(2.0)) * (1 - 1e-12)
    # constant rate: busy stream-seconds times the rate is all the work
    done = 0.0
    for (t0, k), (t1, _) in itertools.pairwise(s.busy_profile):
        done += k * (t1 - t0) * 2.0
    assert done == pytest.approx(sum(it.work for it in items), abs=1e-9)


@settings(max_examples=150, deadline=None)
@given(restore_like(allow_cycles=True), st.integers(1, 4))
def test_with_cycles_never_loops_and_invariants_hold(items: list[WorkItem], workers: int) -> None:
    s = simulate(items, workers, const())
    check_invariants(items, s, workers)


@settings(max_examples=100, deadline=None)
@given(restore_like(), restore_like(), st.integers(1, 4))
def test_running_items_and_varying_rate(pending: list[WorkItem], running: list[WorkItem],
                                        workers: int) -> None:
    running = [WorkItem("r" + it.key, it.work, it.size, it.table, False, frozenset())
               for it in running[:6]]
    def rate(k: int) -> float:  # falls with k
        return 10.0 / (1 + 0.3 * (k - 1))

    s = simulate(pending, workers, rate, running=running, now=50.0)
    assert s.unschedulable == ()
    check_invariants(pending, s, workers, running, now=50.0)
    for i, r in enumerate(running):
        x = by_key(s)[r.key]
        assert x.start == 50.0 and x.worker == i
    # each item's work is the integral of r(k(t)) over its span
    prof = list(s.busy_profile)
    item = {it.key: it for it in [*running, *pending]}
    for x in s.spans:
        got = 0.0
        for (t0, k), (t1, _) in itertools.pairwise(prof):
            lo, hi = max(t0, x.start), min(t1, x.end)
            if hi > lo:
                got += (hi - lo) * rate(k)
        assert got == pytest.approx(item[x.key].work, rel=1e-9, abs=1e-9)


def brute_force_opt(works: Sequence[float], m: int) -> float:
    best = math.inf
    # the first job on machine 0 removes the machine symmetry once
    for assign in itertools.product(range(m), repeat=len(works) - 1):
        loads = [0.0] * m
        loads[0] = works[0]
        for w, a in zip(works[1:], assign, strict=True):
            loads[a] += w
        best = min(best, max(loads))
    return best


@settings(max_examples=120, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=7), st.integers(1, 3))
def test_graham_bound_against_optimum(works: list[int], m: int) -> None:
    # Graham's 4/3 - 1/(3m) holds against the optimum, not the lower bound
    # (3 equal items on 2 workers: LPT = OPT = 2, LB = 1.5), so compare with
    # a brute-force optimum on small instances.
    s = simulate(dump_items(works), m, const())
    opt = brute_force_opt([float(w) for w in works], m)
    assert s.makespan <= (4 / 3 - 1 / (3 * m)) * opt + 1e-9
    assert s.makespan >= opt - 1e-9


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.0, 1000.0), min_size=1, max_size=60), st.integers(1, 16),
       st.floats(0.1, 100.0))
def test_list_scheduling_bound_against_lower_bound(works: list[float], m: int, r: float) -> None:
    # Any greedy list schedule without dependencies ends by
    # sum/m + (1 - 1/m) * max at a constant rate, and never before the bound.
    items = dump_items(works)
    s = simulate(items, m, const(r))
    lb = lower_bound(items, m, const(r))
    assert s.makespan >= lb * (1 - 1e-9)
    assert s.makespan <= (sum(works) / m + (1 - 1 / m) * max(works)) / r * (1 + 1e-9) + 1e-9
    check_invariants(items, s, m)


# ---- helpers: processes an item takes beside its own at its start ----------


def amdahl(f: float = 0.3) -> Callable[[str, int], float]:
    return lambda key, n: 1.0 / (f + (1.0 - f) / n)


def test_a_build_alone_takes_its_helpers_and_runs_faster() -> None:
    """One build on a host of 4 cores, asking for 2 helpers: it gets both
    (3 processes) and ends at work / speedup(3)."""
    items = [WorkItem("ix", 10.0, 10.0, table="t")]
    h = Helpers({"ix": 2}, pool=8, cores=4, speedup=amdahl())
    s = simulate(items, 1, const(), helpers=h)
    assert s.makespan == pytest.approx(10.0 / amdahl()("", 3))
    assert lower_bound(items, 1, const(), h) == pytest.approx(s.makespan)
    # without helpers, or asking for none: the plain work
    assert simulate(items, 1, const()).makespan == 10.0
    no = Helpers({"other": 2}, pool=8, cores=4, speedup=amdahl())
    assert simulate(items, 1, const(), helpers=no).makespan == 10.0


def test_helpers_only_on_cores_the_streams_leave_free() -> None:
    """Four builds at -j 4 on 4 cores: every core holds a stream, none is
    lent, and the run takes the plain time. At -j 2 on 4 cores each build
    gets one of the two free cores."""
    items = [WorkItem(f"ix{i}", 10.0, 10.0, table=f"t{i}") for i in range(4)]
    h = Helpers({it.key: 2 for it in items}, pool=8, cores=4, speedup=amdahl())
    assert simulate(items, 4, const(), helpers=h).makespan == pytest.approx(10.0)
    s = simulate(items, 2, const(), helpers=h)
    # ix0 starts first and finds 3 cores free (4, itself apart): it takes
    # its 2; ix1 then finds 4 - ix0 - its 2 helpers - itself = 0
    sp = by_key(s)
    assert sp["ix0"].end == pytest.approx(10.0 / amdahl()("", 3))
    assert sp["ix1"].end == pytest.approx(10.0)


def test_the_servers_pool_is_shared_by_builds_that_start_together() -> None:
    """A pool of 2 on 16 cores: the first build of three takes both, the
    others none until it ends and gives them back."""
    items = [WorkItem(f"ix{i}", 10.0 - i * 0.001, 10.0 - i, table=f"t{i}") for i in range(3)]
    h = Helpers({it.key: 2 for it in items}, pool=2, cores=16, speedup=amdahl())
    sp = by_key(simulate(items, 3, const(), helpers=h))
    assert sp["ix0"].end == pytest.approx((10.0) / amdahl()("", 3))
    assert sp["ix1"].end == pytest.approx(10.0 - 0.001)
    assert sp["ix2"].end == pytest.approx(10.0 - 0.002)


@settings(max_examples=100, deadline=None)
@given(restore_like(), st.integers(1, 5), st.integers(1, 8), st.integers(0, 4))
def test_helpers_only_shorten_items_and_the_bound_holds(items: list[WorkItem], workers: int,
                                                      cores: int, want: int) -> None:
    """Helpers only shorten items: the streams' busy time is at most the
    work at the rate (each item's own at its speed-up), every item runs,
    and the run never ends before its lower bound, itself no later than
    the bound without helpers."""
    h = Helpers({it.key: want for it in items[::2]}, pool=4, cores=cores, speedup=amdahl())
    s = simulate(items, workers, const(2.0), helpers=h)
    assert s.unschedulable == ()
    check_invariants(items, s, workers)
    assert s.makespan >= lower_bound(items, workers, const(2.0), h) * (1 - 1e-12)
    assert lower_bound(items, workers, const(2.0), h) <= \
        lower_bound(items, workers, const(2.0)) + 1e-12
    busy = sum(k * (t1 - t0) for (t0, k), (t1, _) in itertools.pairwise(s.busy_profile))
    assert busy * 2.0 <= sum(it.work for it in items) * (1 + 1e-9) + 1e-9
    if want == 0 or cores < 2:
        assert s.makespan == pytest.approx(simulate(items, workers, const(2.0)).makespan)
