"""`pgparmon advise --subscription NAME`: logical replication's initial sync.
Units: the caps by both servers' settings (never a count they cannot
start), the settings to change and how (restart or reload), the count
chosen, the largest table's bound. With real servers: a publisher
(wal_level=logical, few replication slots) and a subscriber, the advice for
a subscription to create, run as advised, and bad input."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pytest
from support import pgparmon_cmd, publisher_and_subscriber

from pgparmon.advise import predict, subsettings
from pgparmon.advise.kinds import SUBSCRIPTION
from pgparmon.advise.predict import Compression
from pgparmon.advise.strategies import SubscriptionStrategy, strategy_for
from pgparmon.advise.subscription import (
    TABLE_START_S,
    SyncTable,
    biggest_bound,
    in_heap_bytes,
    work_items,
    worst_order_s,
)
from pgparmon.cluster import Cluster
from pgparmon.exitcodes import ExitCode

integration = pytest.mark.integration
MB = 1e6


def _sides(pub_slots: int = 10, pub_senders: int = 10, slots_held: int = 0,
           senders_held: int = 0, lrw: int = 4, workers_held: int = 0, mwp: int = 8,
           bg_held: int = 1, version: int = 150000) -> tuple[dict, dict]:
    sub = {"version_num": version,
           "settings": {"max_logical_replication_workers": str(lrw),
                        "max_worker_processes": str(mwp), "max_replication_slots": "10",
                        "max_active_replication_origins": "10",
                        "max_sync_workers_per_subscription": "2"},
           "others": {"workers": workers_held, "bgworkers": bg_held}}
    pub = {"settings": {"max_wal_senders": str(pub_senders),
                        "max_replication_slots": str(pub_slots), "wal_level": "logical"},
           "others": {"walsenders": senders_held, "slots": slots_held}}
    return sub, pub


# ------------------------------------------------------------ settings


def test_room_is_the_tightest_setting_on_either_side() -> None:
    sub, pub = _sides(pub_slots=4, slots_held=1)  # 4 - 1 other - 1 own slot = 2
    lims = subsettings.limits(sub, pub)
    room, tight = subsettings.room(lims)
    assert room == 2 and tight is not None
    assert (tight.setting, tight.side) == ("max_replication_slots", "publisher")
    # the subscriber's: 4 workers, 1 apply; 8 processes, the launcher and the apply
    by = {(lim.side, lim.setting): lim.room for lim in lims}
    assert by[("subscriber", "max_logical_replication_workers")] == 3
    assert by[("subscriber", "max_worker_processes")] == 6
    assert by[("publisher", "max_wal_senders")] == 9
    sub, pub = _sides(lrw=4, workers_held=2)  # another subscription's apply and sync
    room, tight = subsettings.room(subsettings.limits(sub, pub))
    assert room == 1 and tight is not None
    assert tight.setting == "max_logical_replication_workers"


def test_origins_setting_by_version() -> None:
    names = {lim.setting for lim in subsettings.limits(*_sides(version=170000))
             if lim.side == "subscriber"}
    assert "max_replication_slots" in names and "max_active_replication_origins" not in names
    names = {lim.setting for lim in subsettings.limits(*_sides(version=180000))
             if lim.side == "subscriber"}
    assert "max_active_replication_origins" in names


def test_unknown_publisher_caps_by_the_subscriber_alone() -> None:
    sub, _pub = _sides()
    lims = subsettings.limits(sub, None)
    assert {lim.side for lim in lims} == {"subscriber"}


def test_changes_say_side_restart_and_whether_needed() -> None:
    sub, pub = _sides(pub_slots=3, pub_senders=2)  # slots: room 2; senders: room 1
    lims = subsettings.limits(sub, pub)
    pub["settings"]["wal_level"] = "replica"
    ch = {c.setting: c for c in subsettings.changes(lims, rec=1, best=4, current_sync=2,
                                                    pub_wal_level="replica")}
    # wal_level: needed, a restart
    assert ch["wal_level"].required and ch["wal_level"].restart
    assert ch["wal_level"].side == "publisher" and "'logical'" in ch["wal_level"].command
    # 4 sync workers need 4 + 1 walsenders and 4 + 1 slots: allowed by a restart,
    # not needed for the 1 recommended
    assert ch["max_wal_senders"].value == "5" and ch["max_wal_senders"].restart
    assert not ch["max_wal_senders"].required and ch["max_wal_senders"].for_jobs == 4
    assert ch["max_replication_slots"].value == "5"
    assert "max_logical_replication_workers" in ch  # 4 + the apply worker > 4
    assert ch["max_logical_replication_workers"].value == "5"
    # the knob itself: a reload on the subscriber
    knob = ch["max_sync_workers_per_subscription"]
    assert knob.side == "subscriber" and not knob.restart and knob.value == "1"
    assert "pg_reload_conf" in knob.command
    assert "restart" in ch["max_wal_senders"].command
    assert "max_worker_processes" not in ch  # 8 - 1 - 1 leaves room for 6


def test_no_room_is_not_startable_and_the_raise_is_needed() -> None:
    sub, pub = _sides(pub_slots=3, slots_held=2)  # 3 - 2 - 1 = 0
    lims = subsettings.limits(sub, pub)
    assert not subsettings.startable(lims)
    assert subsettings.caps(lims)[next(iter(k for k in subsettings.caps(lims)
                                            if "max_replication_slots on the publisher" in k))] \
        == 1
    ch = {c.setting: c for c in subsettings.changes(lims, rec=1, best=1, current_sync=1,
                                                    pub_wal_level="logical")}
    assert ch["max_replication_slots"].required and ch["max_replication_slots"].value == "4"
    assert "max_sync_workers_per_subscription" not in ch  # already 1


# ------------------------------------------------------- the count, the bound


def _static(cores: int = 8, local: bool = True) -> predict.Evidence:
    return predict.static_evidence(SUBSCRIPTION.name, cores, Compression("none"), local)


def _tables() -> list[SyncTable]:
    return [SyncTable("public.big", 800 * MB, 8e6, indexes=1),
            *(SyncTable(f"public.t{i}", 100 * MB, 1e6) for i in range(6)),
            SyncTable("public.tiny", 0.0, 0.0)]


def test_the_largest_table_bounds_every_count() -> None:
    ev = _static()
    items = work_items(_tables(), ev, 0, known_order=False)
    big, alone = biggest_bound(items, ev)  # type: ignore[misc]
    assert big.key == "public.big"
    # its index weighs on its work; every table pays its start
    assert big.work == pytest.approx(800 * MB * 2.5 + TABLE_START_S * ev.rate(1))
    assert items[-1].work == pytest.approx(TABLE_START_S * ev.rate(1))
    preds = predict.predict(ev, items, list(range(1, 9)))
    for p in preds:
        assert p.wall_s >= alone - 1e-6
    # from some count on the big table alone sets the time: more workers gain nothing
    assert preds[-1].wall_s == pytest.approx(alone, rel=1e-6)
    assert "largest table" in preds[-1].bottleneck


def test_count_chosen_then_capped_by_the_settings() -> None:
    ev = _static()
    items = work_items(_tables(), ev, 0, known_order=False)
    preds = predict.predict(ev, items, list(range(1, 9)))
    best = predict.choose(preds, ev.cpu_per_gb, {}).recommended
    # the big table is 2000 of 2600 MB of work: two workers carry the rest beside it
    assert best == 2
    sub, pub = _sides(pub_slots=2)  # room for one sync worker
    lims = subsettings.limits(sub, pub)
    choice = predict.choose(preds, ev.cpu_per_gb, subsettings.caps(lims))
    assert choice.recommended == 1
    assert any("max_replication_slots on the publisher" in c for c in choice.capped_by)
    assert subsettings.startable(lims)


def test_even_tables_want_more_workers_than_a_dominant_one() -> None:
    ev = _static(cores=8)
    even = [SyncTable(f"public.e{i}", 200 * MB, 2e6) for i in range(8)]
    preds = predict.predict(ev, work_items(even, ev, 0, False), list(range(1, 9)))
    assert predict.choose(preds, ev.cpu_per_gb, {}).recommended >= 4


def test_catalog_order_worst_case_and_known_order() -> None:
    ev = _static(cores=2)
    tables = _tables()
    items = work_items(tables, ev, 0, known_order=False)
    lpt = predict.predict(ev, items, [2])[0].wall_s
    assert worst_order_s(items, ev, 2) >= lpt
    # a running subscription's order is its own: the first listed starts first
    known = work_items(list(reversed(tables)), ev, 0, known_order=True)
    assert [it.key for it in sorted(known, key=lambda it: -it.size)][0] == "public.tiny"


def test_evidence_in_heap_bytes() -> None:
    ev = predict.points_evidence("probe", [(1, 50 * MB), (2, 90 * MB), (4, 120 * MB)],
                                 limit="x", cpu_per_gb={1: 20.0})
    h = in_heap_bytes(ev, 1.5)
    for k in (1, 2, 3, 4, 6):
        assert h.throughput(k) == pytest.approx(1.5 * ev.throughput(k))
    assert h.cpu_per_gb[1] == pytest.approx(20.0 / 1.5)


def test_registered_as_its_own_strategy() -> None:
    assert isinstance(strategy_for("subscription"), SubscriptionStrategy)


# --------------------------------------------------------- real servers

SECRET = "sEcReT-pw-25c"
# rows per table: one large with a primary key, others smaller, one with an index
TABLES = {"big": (120_000, "id int PRIMARY KEY, v text"), "mid": (40_000, "id int, v text"),
          "mid2": (40_000, "id int, v text"), "small": (5_000, "id int UNIQUE, v text"),
          "tiny": (100, "id int, v text")}


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Cluster, Cluster]]:
    # room for one sync worker on the publisher: 2 slots, the subscription's own and one
    with publisher_and_subscriber(pub_settings={"max_replication_slots": "2"}) as both:
        yield both


def _advise(sub: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(pgparmon_cmd("advise", "-h", str(sub.sockdir), "-p", str(sub.port),
                                       "-U", "postgres", *args),
                          capture_output=True, text=True, timeout=120, env=sub.env())


@integration
def test_advise_a_subscription_and_sync_as_advised(servers: tuple[Cluster, Cluster]) -> None:
    pub, sub = servers
    pub.psql("CREATE DATABASE src")
    sub.psql("CREATE DATABASE dst")
    ddl = "".join(f"CREATE TABLE {t} ({cols});" for t, (_n, cols) in TABLES.items())
    pub.psql(ddl + "".join(f"INSERT INTO {t} SELECT g, repeat('x', 100) FROM "
                           f"generate_series(1, {n}) g;" for t, (n, _c) in TABLES.items())
             + "ANALYZE; CREATE PUBLICATION p FOR ALL TABLES;", dbname="src")
    sub.psql(ddl, dbname="dst")
    source = f"{pub.conninfo('src')} password={SECRET}"
    r = _advise(sub, "-d", "dst", "--subscription", "s", "--publication", "p",
                "--source", source, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert SECRET not in r.stdout + r.stderr
    a = json.loads(r.stdout)
    assert a["kind"] == "subscription"
    s = a["subscription"]
    # the tables and their sizes: the publisher's pg_class
    pages = {t: int(pub.psql(f"SELECT relpages FROM pg_class WHERE relname = '{t}'",
                             dbname="src")) for t in TABLES}
    assert s["tables"] == len(TABLES) and s["largest_table"] == "public.big"
    assert s["bytes"] == 8192 * sum(pages.values())
    assert s["tables_with_indexes"] == 2 and s["tables_missing"] == []
    # startable: the publisher has 2 slots, one for the subscription: one sync worker
    # (the tables would sync faster on two: the largest beside the others)
    assert a["recommended_jobs"] == 1 and s["startable"] and s["best_jobs"] >= 2
    assert any("max_replication_slots on the publisher" in c for c in a["capped_by"])
    raise_slots = [c for c in a["settings"] if c["setting"] == "max_replication_slots"]
    assert raise_slots and raise_slots[0]["side"] == "publisher"
    assert raise_slots[0]["restart"] and not raise_slots[0]["required"]
    assert raise_slots[0]["set_to"] == str(1 + s["best_jobs"])
    assert any(w["code"] == "settings_cap" for w in a["warnings"])
    # the predicted time against the tables: at least the largest alone, and
    # the whole at one worker is the sum of the tables' work
    rec = next(p for p in a["predictions"] if p["jobs"] == a["recommended_jobs"])
    assert a["predicted_wall_s"] == rec["wall_s"] >= s["largest_alone_s"] > 0
    one = next(p for p in a["predictions"] if p["jobs"] == 1)
    assert one["wall_s"] >= max(p["wall_s"] for p in a["predictions"])
    assert a["why"] and a["confidence"] == "low"
    # measured: the COPY probe on the subscriber, fed a sample of the largest
    # table from the publisher; its scratch table gone, the count still startable
    r = _advise(sub, "-d", "dst", "--subscription", "s", "--publication", "p",
                "--source", source, "--json", "--probe-seconds", "6")
    assert r.returncode == 0, r.stderr[-2000:]
    pa = json.loads(r.stdout)
    assert pa["basis"] == "probe" and pa["probe"]["points"], pa["warnings"]
    assert pa["recommended_jobs"] == 1 and SECRET not in r.stdout
    assert any("read from the publisher" in n for n in pa["notes"])
    assert sub.psql("SELECT count(*) FROM pg_class WHERE relname LIKE 'pgparmon_probe%'",
                    dbname="dst").strip() == "0"
    # the command, run as it is (the password redacted: trust needs none)
    knob = [c for c in a["settings"] if c["setting"] == "max_sync_workers_per_subscription"]
    assert knob and not knob[0]["restart"] and knob[0]["set_to"] == "1"
    assert "CREATE SUBSCRIPTION" in a["command"] and "********" in a["command"]
    t0 = time.monotonic()
    run = subprocess.run(["sh", "-c", a["command"]], capture_output=True, text=True,
                         timeout=60, env=sub.env())
    assert run.returncode == 0, run.stderr[-1000:]
    deadline = time.monotonic() + 60
    while sub.psql("SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r'",
                   dbname="dst").strip() != "0":
        assert time.monotonic() < deadline, "the sync did not end within a minute"
        time.sleep(0.1)
    took = time.monotonic() - t0
    # every sync worker started: no sync error (a worker refused a slot or a walsender)
    errors = sub.psql("SELECT sync_error_count FROM pg_stat_subscription_stats",
                      dbname="dst").strip()
    assert errors == "0", errors
    assert sub.psql("SHOW max_sync_workers_per_subscription").strip() == "1"
    print(f"sync took {took:.2f} s; predicted {a['predicted_wall_s']:.2f} s")
    # the text view says the same
    r = _advise(sub, "-d", "dst", "--subscription", "s2", "--publication", "p",
                "--source", source)
    assert r.returncode == 0 and "max_sync_workers_per_subscription = 1" in r.stdout
    assert "max_replication_slots" in r.stdout and SECRET not in r.stdout
    # the subscription synced: nothing left to advise (one line, exit 2)
    r = _advise(sub, "-d", "dst", "--subscription", "s")
    assert r.returncode == ExitCode.USAGE and "every table is past its copy" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    # a subscription created disabled: its tables wait, its slot holds the
    # publisher's last one: no sync worker can start, and the advice says what
    # to raise; the publisher read through its own connection string (never shown)
    sub.psql("CREATE SCHEMA other; " + ddl.replace("CREATE TABLE ", "CREATE TABLE other."),
             dbname="dst")
    pub.psql("CREATE SCHEMA other; " + ddl.replace("CREATE TABLE ", "CREATE TABLE other.")
             + "CREATE PUBLICATION p2 FOR TABLE " + ", ".join(f"other.{t}" for t in TABLES),
             dbname="src")
    sub.psql(f"CREATE SUBSCRIPTION s3 CONNECTION '{source}' PUBLICATION p2 "
             "WITH (enabled = false)", dbname="dst")
    r = _advise(sub, "-d", "dst", "--subscription", "s3", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert SECRET not in r.stdout + r.stderr
    d = json.loads(r.stdout)
    s3 = d["subscription"]
    assert s3["exists"] and s3["publisher_from"] == "the subscription's connection string"
    assert s3["tables"] == len(TABLES) and s3["worst_order_s"] is None
    assert not s3["startable"] and d["recommended_jobs"] == 1
    codes = {w["code"] for w in d["warnings"]}
    assert {"cannot_start", "disabled"} <= codes
    slots = [c for c in d["settings"] if c["setting"] == "max_replication_slots"]
    assert slots and slots[0]["required"] and int(slots[0]["set_to"]) >= 3


@integration
def test_bad_input(servers: tuple[Cluster, Cluster]) -> None:
    pub, sub = servers
    sub.psql("CREATE DATABASE empty_sub")
    r = _advise(sub, "-d", "empty_sub", "--subscription", "nosuch")
    assert r.returncode == ExitCode.USAGE and "--publication" in r.stderr
    r = _advise(sub, "-d", "empty_sub", "--subscription", "x", "--publication", "nopub",
                "--source", pub.conninfo("postgres"))
    assert r.returncode == ExitCode.USAGE and "no publication nopub" in r.stderr
    r = _advise(sub, "-d", "empty_sub", "--publication", "p")
    assert r.returncode == ExitCode.USAGE and "--subscription" in r.stderr
    r = _advise(sub, "-d", "empty_sub", "--subscription", "x", "--target", "/tmp/x")
    assert r.returncode == ExitCode.USAGE and "leave out" in r.stderr
    assert "Traceback" not in r.stderr
