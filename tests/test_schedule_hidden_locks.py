"""Locks the scheduler does not see (`WorkItem.holds`), and a restore in
sections as two schedules (`jobs.pg_restore.section_steps`): hand-computed."""

from __future__ import annotations

import dataclasses

from pgparmon.analyze.schedule import WorkItem, simulate
from pgparmon.jobs.pg_restore import section_steps


def one(k: int) -> float:
    return 1.0  # every stream 1 unit/s whatever k (no shared limit)


def two_cores(k: int) -> float:
    return 1.0 if k <= 2 else 2.0 / k


def _spans(items: list[WorkItem], j: int, rate=one) -> dict[str, tuple[float, float]]:
    s = simulate(items, j, rate)
    return {sp.key: (round(sp.start, 6), round(sp.end, 6)) for sp in s.spans}


def test_an_item_started_beside_a_held_table_waits_on_its_worker() -> None:
    # the key (5 s) holds partition p1; p1's build (1 s) is handed out next
    # to it and waits for it, holding the second worker; q (2 s) gets no
    # worker until the build is done
    items = [WorkItem("fk", 5.0, size=3.0, table="parent", exclusive=True,
                      holds=frozenset({"p1", "p2"})),
             WorkItem("p1_pkey", 1.0, size=2.0, table="p1", exclusive=True),
             WorkItem("q", 2.0, size=1.0, table="other", exclusive=True)]
    sp = _spans(items, 2)
    assert sp["fk"] == (0.0, 5.0)
    assert sp["p1_pkey"] == (0.0, 6.0)  # dispatched at 0, runs 5..6
    assert sp["q"] == (5.0, 7.0)
    # without the hidden lock the two run together
    plain = [dataclasses.replace(items[0], holds=frozenset()), *items[1:]]
    sp = _spans(plain, 2)
    assert sp["p1_pkey"] == (0.0, 1.0) and sp["q"] == (1.0, 3.0)


def test_a_key_handed_out_while_a_partition_builds_waits_for_the_build() -> None:
    items = [WorkItem("p1_pkey", 2.0, size=3.0, table="p1", exclusive=True),
             WorkItem("fk", 1.0, size=2.0, table="parent", exclusive=True,
                      holds=frozenset({"p1"}))]
    sp = _spans(items, 2)
    assert sp["p1_pkey"] == (0.0, 2.0)
    assert sp["fk"] == (0.0, 3.0)


def test_a_waiting_worker_takes_no_share_of_the_cores() -> None:
    # on two cores, three streams share them; a waiting item is no stream:
    # the key and x run at full speed while the partition's build waits
    items = [WorkItem("fk", 4.0, size=3.0, table="parent", holds=frozenset({"p1"})),
             WorkItem("p1_idx", 1.0, size=2.0, table="p1"),
             WorkItem("x", 4.0, size=1.0, table="x")]
    s = simulate(items, 3, two_cores)
    by = {sp.key: sp for sp in s.spans}
    assert round(by["fk"].end, 6) == 4.0 and round(by["x"].end, 6) == 4.0
    assert round(by["p1_idx"].end, 6) == 5.0
    assert (0.0, 2) in s.busy_profile and (4.0, 1) in s.busy_profile


def test_two_keys_holding_one_partition_do_not_run_together() -> None:
    items = [WorkItem("fk1", 2.0, size=2.0, table="a", holds=frozenset({"p1"})),
             WorkItem("fk2", 3.0, size=1.0, table="b", holds=frozenset({"p1", "p2"}))]
    sp = _spans(items, 2)
    assert sp["fk1"] == (0.0, 2.0) and sp["fk2"] == (0.0, 5.0)


def test_the_post_data_step_goes_in_archive_order_with_the_data_skipped_in_turn() -> None:
    """The post-data step of a restore in sections: pg_restore reaches a
    table's data entry (no work: it is skipped) only when a worker is idle
    and no post-data item is ready, after the post-data entries (higher dump
    ids), so the builds on the tables come one table at a time; the key on
    the partitioned table waits for the referenced key, not its partitions'
    data, and it meets a partition's build that started before it."""
    data = [WorkItem("101", 10.0, size=10.0, table="s.orders_p1"),
            WorkItem("102", 10.0, size=10.0, table="s.lines_p1"),
            WorkItem("103", 10.0, size=10.0, table="s.lines_p2")]
    post = [WorkItem("11", 1.0, size=10.0, table="s.orders_p1", exclusive=True,
                     deps=frozenset({"101"})),  # orders_p1_pkey
            WorkItem("12", 1.0, size=10.0, table="s.lines_p1", exclusive=True,
                     deps=frozenset({"102"})),
            WorkItem("13", 1.0, size=10.0, table="s.lines_p2", exclusive=True,
                     deps=frozenset({"103"})),
            # the key: sized by and (in the one-command plan) waiting for its
            # partitions' data; in the archive, for the referenced key
            WorkItem("20", 4.0, size=20.0, table="s.lines", exclusive=True,
                     deps=frozenset({"11", "102", "103"}),
                     holds=frozenset({"s.lines_p1", "s.lines_p2", "s.orders_p1"}))]
    data_step, post_step = section_steps([*data, *post], frozenset({"101", "102", "103"}))
    assert [it.key for it in data_step] == ["101", "102", "103"]
    by = {it.key: it for it in post_step}
    assert all(by[k].work == 0.0 and by[k].table is None for k in ("101", "102", "103"))
    assert by["20"].deps == frozenset({"11"})
    sp = _spans(post_step, 2)
    # skip 101 -> orders_p1_pkey (0..1) on one worker, skip 102 -> lines_p1
    # (0..1) on the other; at 1 the key is ready before lines_p2's data is
    # reached: it runs 1..5, then skip 103, and lines_p2's build waits for it
    assert sp["11"] == (0.0, 1.0) and sp["12"] == (0.0, 1.0)
    assert sp["20"] == (1.0, 5.0)
    assert sp["13"] == (1.0, 6.0)
    # at -j 3 every table's data is reached at once: the builds run first
    sp = _spans(post_step, 3)
    assert sp["13"] == (0.0, 1.0) and sp["20"] == (1.0, 5.0)


def test_the_foreign_keys_last_run_after_every_build() -> None:
    """The advice's restore in four steps: the post-data step lists every
    item but the early foreign keys (`-L`), the last lists only them. The
    key then starts after every partition's build, whatever the job count
    (at -j 2 in three steps it ran before lines_p2's, above), and no build
    waits on it."""
    data = [WorkItem("101", 10.0, size=10.0, table="s.orders_p1"),
            WorkItem("102", 10.0, size=10.0, table="s.lines_p1"),
            WorkItem("103", 10.0, size=10.0, table="s.lines_p2")]
    post = [WorkItem(k, 1.0, size=10.0, table=t, exclusive=True, deps=frozenset({d}))
            for k, t, d in (("11", "s.orders_p1", "101"), ("12", "s.lines_p1", "102"),
                            ("13", "s.lines_p2", "103"))]
    fk = WorkItem("20", 4.0, size=20.0, table="s.lines", exclusive=True,
                  deps=frozenset({"11", "102", "103"}),
                  holds=frozenset({"s.lines_p1", "s.lines_p2", "s.orders_p1"}))
    steps = section_steps([*data, *post, fk], frozenset({"101", "102", "103"}),
                          frozenset({"20"}))
    assert [[it.key for it in st] for st in steps] == [
        ["101", "102", "103"], ["101", "102", "103", "11", "12", "13"], ["20"]]
    # in its own step the key depends on nothing left to run
    assert steps[2][0].deps == frozenset() and steps[2][0].work == 4.0
    for jobs in (2, 3):
        sp = _spans(steps[1], jobs)
        assert max(e for _, e in sp.values()) == (2.0 if jobs == 2 else 1.0)
        assert _spans(steps[2], jobs)["20"] == (0.0, 4.0)
    # no keys named: the two steps as before
    assert len(section_steps([*data, *post, fk], frozenset({"101", "102", "103"}))) == 2


def test_pg_restores_own_rule_a_key_and_the_index_builds_on_its_table_take_turns() -> None:
    """pg_restore -j never runs an entry that locks a table beside one that
    depends on it (`tables`): a primary key (exclusive) waits for the index
    builds on its table, which run together, and an index build handed out
    while the key runs waits for it (on no worker: pg_restore does not hand
    it out). A foreign key locks the referenced table too: it waits for an
    index build there."""
    a, b = frozenset({"A"}), frozenset({"B"})
    items = [WorkItem("idx1", 2.0, size=5.0, table="A", tables=a),
             WorkItem("idx2", 3.0, size=5.0, table="A", tables=a),
             WorkItem("pkey", 1.0, size=5.0, table="A", exclusive=True, tables=a),
             WorkItem("idxB", 4.0, size=4.0, table="B", tables=b),
             WorkItem("fk", 1.0, size=3.0, table="A", exclusive=True,
                      tables=frozenset({"A", "B"}), deps=frozenset({"pkey"}))]
    sp = _spans(items, 4)
    assert sp["idx1"] == (0.0, 2.0) and sp["idx2"] == (0.0, 3.0)
    assert sp["idxB"] == (0.0, 4.0)
    assert sp["pkey"] == (3.0, 4.0)  # after both builds on A
    assert sp["fk"] == (4.0, 5.0)  # after the key and the build on B
    # the key handed out first: the builds on its table wait for it
    first = [dataclasses.replace(items[2], size=6.0), *items[:2]]
    sp = _spans(first, 3)
    assert sp["pkey"] == (0.0, 1.0)
    assert sp["idx1"] == (1.0, 3.0) and sp["idx2"] == (1.0, 4.0)
    # without `tables` (the older rule): the key runs beside the builds
    sp = _spans([dataclasses.replace(it, tables=frozenset()) for it in items], 4)
    assert sp["pkey"] == (0.0, 1.0) and sp["fk"] == (1.0, 2.0)


def test_a_restore_plan_names_each_entrys_tables_and_takes_ties_by_dump_id() -> None:
    """plan_archive: an index or key names its table, a foreign key its table
    and the referenced one (pg_restore's lock rule); a table's builds share
    its size and go in dump-id order, as pg_restore takes ties."""
    from pgparmon.analyze.progress import Tracker
    from pgparmon.ddl import PostDataTarget
    from pgparmon.jobs.base import Job
    from pgparmon.jobs.pg_restore import plan_archive
    from pgparmon.jobs.registry import driver_for
    from pgparmon.toc import TocItem

    toc = [TocItem(100, 0, 0, "TABLE DATA", "public", "a", "o"),
           TocItem(101, 0, 0, "TABLE DATA", "public", "b", "o"),
           # the archive lists the key before the indexes; dump ids say otherwise
           TocItem(30, 0, 0, "CONSTRAINT", "public", "a a_pkey", "o"),
           TocItem(21, 0, 0, "INDEX", "public", "a_x_idx", "o"),
           TocItem(22, 0, 0, "INDEX", "public", "a_y_idx", "o"),
           TocItem(40, 0, 0, "FK CONSTRAINT", "public", "a a_b_fkey", "o")]
    targets = {30: PostDataTarget("CONSTRAINT", "public", "a a_pkey", "public.a", None,
                                  "primary key", 30, (100,)),
               21: PostDataTarget("INDEX", "public", "a_x_idx", "public.a", None, "index",
                                  21, (100,)),
               22: PostDataTarget("INDEX", "public", "a_y_idx", "public.a", None, "index",
                                  22, (100,)),
               40: PostDataTarget("FK CONSTRAINT", "public", "a a_b_fkey", "public.a",
                                  "public.b", "foreign key", 40, (100, 101, 30))}
    tr = Tracker(Job(kind="pg_restore", database=None), driver_for("pg_restore"))
    # the restore's tracker, as restore_inventory makes it
    plan_archive(tr, toc, {"100": (None, 1000.0), "101": (None, 500.0)}, targets)
    items = tr.items
    assert items["30"].tables == items["21"].tables == frozenset({"public.a"})
    assert items["40"].tables == frozenset({"public.a", "public.b"})
    assert items["100"].tables == frozenset()  # a load takes no part in the rule
    post = [k for k in items if k not in ("100", "101")]
    assert post == ["21", "22", "30", "40"]
    # on four workers the indexes go first and the key after them
    from pgparmon.advise.inventory import _work_items
    sp = _spans(_work_items(tr), 4)
    assert sp["21"][0] == sp["22"][0] == sp["100"][1]
    assert sp["30"][0] == max(sp["21"][1], sp["22"][1])
    assert sp["40"][0] >= sp["30"][1]
