"""The ETA of a work list of thousands of items: the small items simulated
in batches whose waiting work is kept between samples, and the tracker's
counts kept as items change state (no pass over every item a sample)."""

from __future__ import annotations

import random

import pytest

from pgparmon.analyze import eta
from pgparmon.analyze.progress import Tracker
from pgparmon.ddl import KEY_COSTS, PostDataTarget
from pgparmon.jobs.registry import driver_for
from pgparmon.jobs.base import Job
from pgparmon.jobs.pg_restore import plan_archive
from pgparmon.toc import TocItem


def _restore(tables: int, indexes: int, seed: int = 5) -> Tracker:
    rnd = random.Random(seed)
    toc = [TocItem(10 + i, 0, 0, "TABLE DATA", "public", f"t{i}", "o") for i in range(tables)]
    toc += [TocItem(10 + tables + j, 0, 0, "INDEX", "public", f"t{j}_idx", "o")
            for j in range(indexes)]
    files = {str(10 + i): (None, float(rnd.choice([2e9, 5e8] if i < 3 else [8e3, 5e4, 2e5])))
             for i in range(tables)}

    targets = {10 + tables + j: PostDataTarget("INDEX", "public", f"t{j}_idx",
                                               f"public.t{j % tables}", None, "index")
               for j in range(indexes)}
    tr = Tracker(Job(kind="pg_restore", database="db", jobs=4), driver_for("pg_restore"))
    plan_archive(tr, toc, files, targets)
    # four streams at 10 MB/s each for 10 s
    tr.history = [(float(t), 4, 4e7 * t) for t in range(11)]
    return tr


def _exact(tr: Tracker, monkeypatch: pytest.MonkeyPatch) -> float:
    with monkeypatch.context() as m:
        m.setattr(eta, "MAX_SIMULATED", 10 ** 9)
        saved = eta._TAILS.pop(tr, None)
        secs = eta.estimate(tr).seconds
        if saved is not None:
            eta._TAILS[tr] = saved
    assert secs is not None
    return secs


def _sums(tail: eta._Tail) -> list[tuple[int, float, float, float]]:
    return [(c, round(a, 3), round(b, 3), round(o, 3))
            for c, a, b, o in zip(tail.count, tail.bfull, tail.bwork, tail.other)]


def test_batched_eta_agrees_with_simulating_every_item(monkeypatch: pytest.MonkeyPatch) -> None:
    tr = _restore(6000, 3000)
    coarse = eta.estimate(tr).seconds
    tail = eta._TAILS.get(tr)  # the ETA's batches of this tracker's work list
    assert isinstance(tail, eta._Tail)
    assert len(tail.keys) <= eta.MAX_SIMULATED
    exact = _exact(tr, monkeypatch)
    assert coarse == pytest.approx(exact, rel=0.02)
    # the run goes on: the large tables and a stretch of small ones start,
    # some finish; the index batches still wait on the data batches
    items = list(tr.items.values())
    for it in items[:40]:
        tr.set_state(it, "running")
    for it in items[40:2500]:
        tr.set_state(it, "running")
        tr.finish(it, 1.0)
    coarse = eta.estimate(tr).seconds
    assert coarse == pytest.approx(_exact(tr, monkeypatch), rel=0.02)


def test_batches_follow_the_items_that_left_pending() -> None:
    tr = _restore(3000, 2000)
    eta.estimate(tr)
    tail = eta._TAILS.get(tr)
    assert isinstance(tail, eta._Tail)
    rnd = random.Random(3)
    for it in rnd.sample(list(tr.items.values()), 1500):
        tr.set_state(it, rnd.choice(["running", "finishing", "done"]))
    eta.estimate(tr)
    assert eta._TAILS.get(tr) is tail  # kept, not made again
    fresh = eta._Tail(tr)
    assert fresh.keys == tail.keys
    assert _sums(tail) == _sums(fresh)
    # batched items wait while pending; single ones, as in the item-by-item
    # simulation, until they are running or done
    single = {it.key for it in tail.singles}
    assert tail.waiting() == sum(1 for it in tr.items.values() if it.state == "pending"
                                 or (it.key in single and it.state == "finishing"))


def test_the_end_of_a_long_list_is_simulated_item_by_item(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tr = _restore(2000, 1000)
    items = sorted(tr.items.values(), key=lambda it: it.size)
    for it in items[:-eta.MAX_SIMULATED]:
        tr.finish(it, 1.0)
    assert eta.estimate(tr).seconds == pytest.approx(_exact(tr, monkeypatch), rel=1e-9)


def test_tracker_counts_follow_every_change() -> None:
    tr = _restore(50, 20)
    items = list(tr.items.values())
    tr.set_state(items[0], "running")
    tr.set_state(items[1], "finishing")
    tr.finish(items[2], 1.0)
    tr.finish(items[1], 2.0)
    tr.remove(items[3].key)
    for state in ("pending", "running", "finishing", "done"):
        assert tr.count(state) == sum(1 for it in tr.items.values() if it.state == state)
    assert list(tr.in_flight) == [items[0].key]
    assert tr.running() == [items[0]]
    assert tr.left_pending == [items[0].key, items[1].key, items[2].key]


def test_a_work_list_changed_at_the_same_length_makes_the_batches_again() -> None:
    """A COPY job's stand-in items give way to its plan's: one item gone and
    another come between two samples leaves the count the same."""
    from pgparmon.analyze.items import Item

    tr = _restore(2000, 1000)
    eta.estimate(tr)
    tail = eta._TAILS.get(tr)
    gone = next(k for k, it in tr.items.items() if it.kind == "data" and it.size < 1e5)
    tr.remove(gone)
    tr.add(Item(key="new", kind="data", relation="public.new", name="public.new", size=9e3,
                work=9e3))
    assert eta.estimate(tr).seconds is not None
    again = eta._TAILS.get(tr)
    assert again is not None and again is not tail and "new" in again.batch_of
    assert gone not in again.batch_of


def test_a_key_waits_for_the_referenced_keys_through_their_attachments() -> None:
    """pg_restore -j starts a foreign key only once its archive dependencies
    are done: on a partitioned referenced table, the parent's key (ON ONLY)
    and each partition's key through its INDEX ATTACH entry, which is no work
    item of its own and is followed; pre-data entries are not items."""
    from pgparmon.jobs.pg_restore import post_data_order

    def t(dump_id: int, desc: str, deps: tuple[int, ...]) -> PostDataTarget:
        return PostDataTarget(desc, "public", f"x{dump_id}", None, None, "other",
                              dump_id, deps)

    targets = {20: t(20, "CONSTRAINT", (5,)),          # orders_pkey ON ONLY (5: TABLE)
               21: t(21, "CONSTRAINT", (6, 20)),       # orders_p1_pkey
               22: t(22, "CONSTRAINT", (7, 20)),       # orders_p2_pkey
               31: t(31, "INDEX ATTACH", (21, 20, 6)),
               32: t(32, "INDEX ATTACH", (22, 20, 7)),
               40: t(40, "FK CONSTRAINT", (31, 32, 20, 5, 8)),
               41: t(41, "INDEX", (8,))}               # nothing post-data before it
    planned = {"20", "21", "22", "40", "41", "100", "101"}  # 100, 101: data items
    order = post_data_order(targets, planned)
    assert order["40"] == frozenset({"20", "21", "22"})
    assert order["21"] == order["22"] == frozenset({"20"})
    assert "41" not in order and "20" not in order


def _in_steps(tr: Tracker, streams: list[int | None]) -> None:
    """The tracker's builds run by the next step (a restore in steps, in
    its data step now)."""
    from pgparmon.jobs.base import state_of
    from pgparmon.jobs.pg_restore import RestoreState
    from pgparmon.jobs.progress import LaterSteps

    later = {it.key: 1 for it in tr.items.values() if it.kind != "data"}
    state_of(tr, RestoreState).later = LaterSteps(later, streams)


def test_a_later_step_runs_after_this_one_not_beside_it() -> None:
    """A restore in steps, in its data step: one big table with no index
    and three of a quarter of it, each with one. In one schedule the small
    tables' builds fill the streams left idle while the big table loads;
    the post-data step starts only when the data step has ended, so the ETA
    is the data's schedule and then the builds', at the next step's -j."""
    from pgparmon.analyze.schedule import simulate

    toc = [TocItem(10 + i, 0, 0, "TABLE DATA", "public", f"t{i}", "o") for i in range(4)]
    toc += [TocItem(20 + i, 0, 0, "INDEX", "public", f"t{i}_idx", "o") for i in range(1, 4)]

    targets = {20 + i: PostDataTarget("INDEX", "public", f"t{i}_idx", f"public.t{i}", None,
                                      "index") for i in range(1, 4)}
    files = {str(10 + i): (None, 2e9 if i == 0 else 5e8) for i in range(4)}
    tr = Tracker(Job(kind="pg_restore", database="db", jobs=4), driver_for("pg_restore"))
    plan_archive(tr, toc, files, targets)
    tr.history = [(float(t), 4, 4e7 * t) for t in range(11)]
    one = eta.estimate(tr).seconds
    rate = eta.per_stream_rate(tr)
    assert one is not None and rate is not None
    data = [it.work_item(it.work) for it in tr.items.values() if it.kind == "data"]
    builds = [it.work_item(it.work, frozenset()) for it in tr.items.values()
              if it.kind != "data"]
    for streams, j in (([None], 4), ([2], 2)):
        _in_steps(tr, streams)
        stepped = eta.estimate(tr)
        want = simulate(data, 4, rate).makespan + simulate(builds, j, rate).makespan
        assert stepped.seconds == pytest.approx(want, rel=1e-9)
        assert stepped.seconds > one and stepped.last_item in ("t1_idx", "t2_idx", "t3_idx")
    # the builds fit in the big load's tail in one schedule: the steps add
    # them after it
    assert one == pytest.approx(simulate(data, 4, rate).makespan, rel=1e-9)


def test_batches_keep_to_their_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thousands of items of two steps: no batch holds items of both, and
    the batched ETA agrees with simulating every item, step after step."""
    tr = _restore(6000, 3000)
    _in_steps(tr, [None])
    coarse = eta.estimate(tr).seconds
    tail = eta._TAILS.get(tr)
    assert isinstance(tail, eta._Tail) and tail.part_of is not None
    parts: dict[int, set[int]] = {}
    for key, b in tail.batch_of.items():
        parts.setdefault(b, set()).add(tail.part_of.get(key, 0))
    assert all(len(p) == 1 for p in parts.values())
    assert {tail.part[k] for k in tail.keys} == {0, 1}
    assert coarse == pytest.approx(_exact(tr, monkeypatch), rel=0.02)
    _in_steps(tr, [None])  # a new plan's steps: the batches are made again
    eta.estimate(tr)
    assert eta._TAILS.get(tr) is not tail


def test_a_build_follows_its_tables_rows(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A restore's builds sort rows: a table of 4 kB rows and one of 50-byte
    rows, the same bytes each, a primary key on each. Planned per byte, the
    wide table's key weighed as much as the narrow one's; per row (the
    widths the plan reads from the largest data files' heads), a few
    hundredths of it. A build timed on the narrow table times the wide
    one's by their work, not by their tables' bytes."""
    import gzip

    from pgparmon.analyze.progress import DEFAULT_TEXT_RATIO
    from pgparmon.jobs.archive_files import row_widths

    narrow = b"".join(b"%d\t%s\n" % (i, b"x" * 40) for i in range(20000))
    wide = b"".join(b"%d\t%s\n" % (i, b"y" * 4000) for i in range(200))
    paths = {}
    for name, body in (("narrow", narrow), ("wide", wide)):
        p = tmp_path / f"{name}.dat.gz"
        p.write_bytes(gzip.compress(body))
        paths[name] = (str(p), float(p.stat().st_size))
    widths = row_widths({f"public.{k}": v for k, v in paths.items()})
    # (the head holds the shorter numbers: a sample, within a few percent)
    assert widths["public.narrow"] == pytest.approx(len(narrow) / 20000, rel=0.03)
    assert widths["public.wide"] == pytest.approx(len(wide) / 200, rel=0.01)
    biggest = max(paths, key=lambda k: paths[k][1])  # only the largest file is read
    assert list(row_widths({f"public.{k}": v for k, v in paths.items()}, most=1)) == \
        [f"public.{biggest}"]

    toc = [TocItem(10, 0, 0, "TABLE DATA", "public", "narrow", "o"),
           TocItem(11, 0, 0, "TABLE DATA", "public", "wide", "o"),
           TocItem(20, 0, 0, "CONSTRAINT", "public", "narrow narrow_pkey", "o"),
           TocItem(21, 0, 0, "CONSTRAINT", "public", "wide wide_pkey", "o")]
    targets = {20 + i: PostDataTarget("CONSTRAINT", "public", f"{t} {t}_pkey", f"public.{t}",
                                      None, "primary key")
               for i, t in enumerate(("narrow", "wide"))}
    files = {"10": (None, 1e8), "11": (None, 1e8)}

    def plan(row_bytes: dict[str, float] | None) -> Tracker:
        tr = Tracker(Job(kind="pg_restore", database="db", jobs=2), driver_for("pg_restore"))
        plan_archive(tr, toc, files, targets, row_bytes=row_bytes)
        return tr

    per_byte = plan(None)
    assert per_byte.items["20"].work == per_byte.items["21"].work == 0.5e8
    heap = {k: v / DEFAULT_TEXT_RATIO for k, v in widths.items()}
    per_row = plan(heap)
    n, w = per_row.items["20"], per_row.items["21"]
    assert n.work == pytest.approx(0.5e8 * 60 / heap["public.narrow"])
    assert w.work == pytest.approx(0.5e8 * 0.02)  # held at ROW_SCALE_MIN
    # the narrow key timed: 2 s for its work; the wide one is its share
    per_row.history = [(float(t), 2, 2e7 * t) for t in range(11)]
    n.seen_running, n.started = True, 100.0
    per_row.finish(n, 102.0)
    spw = per_row.build_seconds_per_work()
    assert spw == pytest.approx(2.0 / n.work)
    assert spw * w.work == pytest.approx(2.0 * w.work / n.work) and spw * w.work < 0.05


def test_a_text_key_build_costs_its_key_and_teaches_by_it() -> None:
    """Two builds on one table's rows: a primary key on an int column and an
    index on a text column. The text key's work is KEY_COSTS["text"] x the
    int key's (a sort of text keys compares slower); once the text key's
    build is timed, the int key is expected in its share of that time, not
    the same time."""
    toc = [TocItem(10, 0, 0, "TABLE DATA", "public", "t", "o"),
           TocItem(20, 0, 0, "CONSTRAINT", "public", "t t_pkey", "o"),
           TocItem(21, 0, 0, "INDEX", "public", "t_name_idx", "o")]
    targets = {20: PostDataTarget("CONSTRAINT", "public", "t t_pkey", "public.t", None,
                                  "primary key", key=("id",)),
               21: PostDataTarget("INDEX", "public", "t_name_idx", "public.t", None, "index",
                                  key=("name",))}
    files = {"10": (None, 1e8)}
    tr = Tracker(Job(kind="pg_restore", database="db", jobs=2), driver_for("pg_restore"))
    plan_archive(tr, toc, files, targets, key_costs={21: KEY_COSTS["text"]})
    pk, ix = tr.items["20"], tr.items["21"]
    assert ix.work == pytest.approx(KEY_COSTS["text"] * pk.work) and KEY_COSTS["text"] > 1
    tr.history = [(float(t), 2, 2e7 * t) for t in range(11)]
    ix.seen_running, ix.started = True, 100.0
    tr.finish(ix, 104.0)
    assert tr.build_seconds_per_work() * pk.work == pytest.approx(4.0 / KEY_COSTS["text"])


def test_an_item_ends_when_its_session_says_not_at_the_sample_that_misses_it() -> None:
    """A build timed to the sample that no longer shows it ran up to an
    interval long. Its session tells better: idle since its statement
    ended (state_change), or on a later statement (query_start); the
    server's clock (here 100 s ahead) moved onto ours, never before the
    item's start; without a session or a server time, the sample's."""
    from types import SimpleNamespace as NS

    from pgparmon.analyze.items import Item

    it = Item(key="1", kind="index", relation="public.t", name="t_i", size=1.0, work=1.0)
    it.worker, it.started = 7, 100.0

    def snap(state: str | None, change: float | None = None, query: float | None = None,
             server_ts: float | None = 203.0) -> NS:
        bs = () if state is None else (NS(pid=7, state=state, state_change=change,
                                          query_start=query),)
        return NS(wall=103.0, db=NS(error=None, server_ts=server_ts, backends=bs))

    assert Tracker._ended(it, snap("idle", change=201.5)) == pytest.approx(101.5)
    assert Tracker._ended(it, snap("idle in transaction", change=202.0)) == pytest.approx(102.0)
    assert Tracker._ended(it, snap("active", query=202.5)) == pytest.approx(102.5)
    assert Tracker._ended(it, snap("idle", change=150.0)) == 100.0  # not before its start
    assert Tracker._ended(it, snap(None)) == 103.0
    assert Tracker._ended(it, snap("idle", change=201.5, server_ts=None)) == 103.0
    it.worker = None
    assert Tracker._ended(it, snap("idle", change=201.5)) == 103.0
