"""A plan that comes after the samples have seen its tables load (a slow
reading of a large archive, a TOC written late): each table stays one item,
the plan's, with what the samples saw of it."""

from __future__ import annotations

import pytest

from pgparmon.analyze.progress import Tracker
from pgparmon.jobs.base import Job
from pgparmon.jobs.pg_restore import plan_archive
from pgparmon.jobs.registry import driver_for
from pgparmon.jobs.tables import plan_tables
from pgparmon.snapshot import Backend
from pgparmon.toc import TocItem


def _copy(pid: int, rel: str) -> Backend:
    return Backend(pid=pid, datname="db", usename="u", application_name="pg_restore",
                   client_addr=None, client_port=-1, backend_start=1.0, xact_start=1.0,
                   query_start=1.0, state="active", wait_event_type=None, wait_event=None,
                   backend_type="client backend", backend_xmin=None, leader_pid=None,
                   query=f"COPY {rel} FROM stdin;")


def test_a_restores_plan_takes_over_the_tables_seen_before_it() -> None:
    tr = Tracker(Job(kind="pg_restore", database="db", client_pid=100, jobs=2),
                 driver_for("pg_restore"))
    # before the plan: two tables seen loading, one of them already done
    key_a = tr.driver.copy_item(tr, _copy(7, "public.a"), "public.a")
    key_b = tr.driver.copy_item(tr, _copy(8, "public.b"), "public.b")
    assert (key_a, key_b) == ("public.a", "public.b") and len(tr.items) == 2
    a, b = tr.items["public.a"], tr.items["public.b"]
    tr.set_state(a, "running")
    a.started, a.worker, a.bytes_done, a.done = 100.0, 7, 5000, 0.5
    tr.set_state(b, "running")
    b.started = 90.0
    tr.finish(b, 110.0)
    toc = [TocItem(11, 0, 0, "TABLE DATA", "public", "a", "o"),
           TocItem(12, 0, 0, "TABLE DATA", "public", "b", "o"),
           TocItem(13, 0, 0, "TABLE DATA", "public", "c", "o")]
    plan_archive(tr, toc, {"11": (None, 4e6), "12": (None, 1e6), "13": (None, 2e6)}, {})
    # three tables, three items: the stand-ins are the plan's items now
    assert sorted(tr.items) == ["11", "12", "13"]
    assert tr.by_relation == {"public.a": "11", "public.b": "12", "public.c": "13"}
    a, b, c = tr.items["11"], tr.items["12"], tr.items["13"]
    assert a.state == "running" and a.started == 100.0 and a.worker == 7
    assert a.bytes_done == 5000 and a.done == pytest.approx(0.5 * 4e6)
    assert b.state == "done" and b.started == 90.0 and b.finished == 110.0
    assert c.state == "pending"
    assert tr.count("running") == 1 and tr.count("done") == 1 and tr.count("pending") == 1
    assert list(tr.in_flight) == ["11"]
    # the next sample's COPY of a finds the plan's item
    assert tr.driver.copy_item(tr, _copy(7, "public.a"), "public.a") == "11"


def test_a_plan_keyed_by_table_keeps_what_was_seen() -> None:
    """A dump's plan read without its TOC keys its items by table, as the
    stand-in is: the item is replaced, not reset to pending."""
    tr = Tracker(Job(kind="pg_dump", database="db", client_pid=100, jobs=2),
                 driver_for("pg_dump"))
    tr.add_data_item("public.a")
    a = tr.items["public.a"]
    tr.set_state(a, "running")
    a.started = 50.0
    # (oid, schema, name, relkind, relpages, reltuples, toast relpages)
    plan_tables(tr, None, [[1, "public", "a", "r", 100, 1000.0, 0],
                           [2, "public", "b", "r", 10, 100.0, 0]])
    assert sorted(tr.items) == ["public.a", "public.b"]
    a = tr.items["public.a"]
    assert a.state == "running" and a.started == 50.0 and not a.stand_in
    assert a.work == 100 * tr.block_size
    assert tr.count("running") == 1 and tr.count("pending") == 1
