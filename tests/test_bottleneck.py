"""The one-line verdict, from hand-built observations."""

from __future__ import annotations

from dataclasses import dataclass

from pgparmon.analyze.bottleneck import STALLED, Verdict, WorkerObs, against_stall, judge


@dataclass
class Host:
    cpu_percent: float
    iowait_percent: float = 0.0


@dataclass
class Disk:
    util_percent: float


def obs(phase: str = "copy", wait: str | None = None, client: float | None = None,
        server: float | None = None) -> WorkerObs:
    return WorkerObs(phase, wait, client, server, "to")


def window(*workers: WorkerObs, n: int = 4) -> list[list[WorkerObs]]:
    return [list(workers) for _ in range(n)]


def test_compression_bound_dump() -> None:
    v = judge(window(obs(wait="Client:ClientWrite", client=99), obs(wait="Client:ClientWrite",
                                                                     client=97)),
              flow="out", tool="pg_dump", jobs=2, pending=5, running_items=[("a", .1), ("b", .2)],
              host=Host(60))
    assert v.kind == "client-cpu"
    assert "-Z 1" in v.detail


def test_client_write_with_busy_disk_is_disk_write() -> None:
    v = judge(window(obs(wait="Client:ClientWrite", client=20)), flow="out", tool="pg_dump", jobs=1,
              pending=3, running_items=[("a", .5)], host=Host(30),
              devices={"sda": Disk(97)})
    assert v.kind == "disk-write"
    assert "sda" in v.detail


def test_storage_reads() -> None:
    v = judge(window(obs(wait="IO:DataFileRead"), obs(wait="IO:DataFileRead"), obs()),
              flow="out", tool="pg_dump", jobs=3, pending=4, running_items=[("a", .1)] * 3,
              host=Host(40))
    assert v.kind == "disk-read"


def test_wal_pressure_on_restore() -> None:
    v = judge(window(obs(wait="LWLock:WALWrite"), obs(wait="IO:WALSync")), flow="in",
              tool="pg_restore",
              jobs=2, pending=9, running_items=[("a", .1), ("b", .1)], host=Host(50))
    assert v.kind == "wal" and "max_wal_size" in v.detail


def test_locks() -> None:
    v = judge(window(obs(phase="lock-wait", wait="Lock:relation"), obs()), flow="in",
              tool="pg_restore",
              jobs=2, pending=1, running_items=[("a", .1)], host=Host(10))
    assert v.kind == "locks"


def test_one_table_left_names_it_and_the_inner_limit() -> None:
    v = judge(window(obs(wait="Client:ClientWrite", client=99), obs(phase="idle")),
              flow="out", tool="pg_dump", jobs=4, pending=0, running_items=[("public.orders", .42)],
              host=Host(30))
    assert v.kind == "one-table"
    assert "public.orders" in v.detail and "42%" in v.detail and "3 of 4" in v.detail
    assert "compression" in v.detail


def test_host_cpu_and_server_cpu() -> None:
    v = judge(window(obs(), obs()), flow="in", tool="pg_restore", jobs=2, pending=3,
              running_items=[("a", .1), ("b", .1)], host=Host(97))
    assert v.kind == "host-cpu"
    v = judge(window(obs(server=95), obs(server=92)), flow="in", tool="pg_restore", jobs=2,
              pending=3,
              running_items=[("a", .1), ("b", .1)], host=Host(50))
    assert v.kind == "server-cpu"


def test_stalled_and_stopped() -> None:
    v = judge(window(obs()), flow="out", tool="pg_dump", jobs=2, pending=2,
              running_items=[("a", .1)],
              host=Host(1), stopped_clients=2)
    assert v.kind == "stalled" and "SIGSTOP" in v.detail
    v = judge(window(obs()), flow="out", tool="pg_dump", jobs=2, pending=2,
              running_items=[("a", .1)],
              host=Host(1), stalled=True)
    assert v.kind == "stalled"


def test_a_stall_keeps_a_reason_that_names_the_wait() -> None:
    """A stall replaces a reason that does not explain it, never one that
    names what the workers wait on (a lock): that one stays, the stall said."""
    locked = window(obs(phase="lock-wait", wait="Lock:relation"), obs(phase="lock-wait"))
    v = judge(locked, flow="in", tool="pg_restore", jobs=2, pending=1,
              running_items=[("a", .1)], host=Host(10), stalled=True)
    assert v.kind == "locks" and "no progress" in v.detail
    # stopped clients say more than their sessions' locks
    v = judge(locked, flow="in", tool="pg_restore", jobs=2, pending=1,
              running_items=[("a", .1)], host=Host(10), stalled=True, stopped_clients=1)
    assert v.kind == "stalled" and "SIGSTOP" in v.detail
    own = Verdict("locks", "ANALYZE of public.a waits for pid 99")
    kept = against_stall(own, True)
    assert kept is not None and kept.kind == "locks" and kept.detail.startswith(own.detail)
    assert "no progress" in kept.detail
    assert against_stall(own, False) is own
    assert against_stall(Verdict("throttled", "VacuumDelay"), True) is None
    assert against_stall(None, True) is None and STALLED.kind == "stalled"


def test_nothing_saturated() -> None:
    v = judge(window(obs(client=30, server=40)), flow="out", tool="pg_dump", jobs=1, pending=3,
              running_items=[("a", .1)], host=Host(35))
    assert v.kind == "nothing"
    v = judge([], flow="out", tool="pg_dump", jobs=2, pending=3, running_items=[], host=None)
    assert v.kind == "starting"


def test_sessions_idle_through_the_window_mean_the_client_sends_no_work() -> None:
    idle = obs(phase="idle", wait="Client:ClientRead", client=12)
    v = judge(window(idle, idle), flow="in", tool="copy", jobs=None, pending=0,
              running_items=[], host=Host(30))
    assert v.kind == "client-feed" and "between batches" in v.detail
    busy = obs(phase="idle", wait="Client:ClientRead", client=98)
    v = judge(window(busy, busy), flow="in", tool="copy", jobs=None, pending=0,
              running_items=[], host=Host(60))
    assert v.kind == "client-cpu" and "next batch" in v.detail
    # one sample of the window with a working session: not idle through it
    mixed = [[idle, idle], [obs(phase="copy")], [idle, idle]]
    assert judge(mixed, flow="in", tool="copy", jobs=None, pending=0, running_items=[],
                 host=Host(30)).kind != "client-feed"
    # no session left at all (a dump's workers gone at its end): nothing runs
    assert judge([[], []], flow="out", tool="pg_dump", jobs=2, pending=0, running_items=[],
                 host=Host(30)).kind == "nothing"
    # work still queued: the workers are starting, not the client idling
    assert judge(window(idle), flow="in", tool="pg_restore", jobs=2, pending=3,
                 running_items=[], host=Host(30)).kind == "starting"


def test_backup_wal_warnings() -> None:
    from pgparmon.analyze.warnings import SLOT_RETAINS_BYTES, BackupWal

    bw = BackupWal()
    # archiving works: nothing; then fails after its last success: said
    assert bw.check((10, 2, "000000010000000000000003", 100.0, 200.0), ()) == []
    (w,) = bw.check((10, 4, "000000010000000000000009", 300.0, 200.0), ())
    assert w.code == "archive-failing" and "2 failure(s) since the backup began" in w.message
    assert "000000010000000000000009" in w.message
    assert bw.check((11, 4, "000000010000000000000009", 300.0, 310.0), ()) == []  # fixed
    slots = (("busy", "physical", True, "extended", 5 * SLOT_RETAINS_BYTES),
             ("old", "logical", False, "extended", 3 * SLOT_RETAINS_BYTES),
             ("small", "physical", False, "reserved", SLOT_RETAINS_BYTES // 2),
             ("gone", "physical", False, "lost", None))
    got = {w.code: w.message for w in bw.check(None, slots)}
    assert set(got) == {"slot-retains-wal", "slot-lost"}
    assert "old (logical)" in got["slot-retains-wal"] and "3.2 GB" in got["slot-retains-wal"]
    assert "pg_drop_replication_slot('gone')" in got["slot-lost"]


def test_a_foreign_key_added_before_its_partitions_data() -> None:
    """A restore's key on a partitioned table running while loads it checks
    have not started (pg_restore -j's order) is said, with the fix; a load
    already running is not enough (the tracker may not have seen it end),
    nor a pending key, nor a key whose data is all loaded."""
    from pgparmon.analyze.items import Item
    from pgparmon.analyze.warnings import early_foreign_keys

    def item(key: str, kind: str, rel: str, state: str, deps: tuple[str, ...] = ()) -> Item:
        return Item(key=key, kind=kind, relation=rel, name=f"{kind} {rel}", size=1.0,
                    work=1.0, state=state, deps=frozenset(deps))

    parts = [item("d1", "data", "public.o_1", "done"), item("d2", "data", "public.o_2", "running"),
             item("d3", "data", "public.o_3", "pending"), item("d4", "data", "public.o_4",
                                                                 "pending")]
    fk = item("fk", "fk", "public.orders", "running", ("d1", "d2", "d3", "d4", "ix"))
    (w,) = early_foreign_keys({i.key: i for i in [*parts, fk]})
    assert w.code == "fk-before-partitions"
    assert "data of 2 of the tables it checks (public.o_3, public.o_4)" in w.message
    assert "--section=data" in w.message
    fk.state = "pending"
    assert early_foreign_keys({i.key: i for i in [*parts, fk]}) == []
    fk.state = "done"
    for p in parts[2:]:
        p.state = "running"
    assert early_foreign_keys({i.key: i for i in [*parts, fk]}) == []
