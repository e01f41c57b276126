"""Logical replication's initial sync, followed with real servers: a
publisher (wal_level=logical) and a subscriber, tables of uneven sizes with
and without indexes, a subscription with copy_data. The sync is slowed by a
trigger that naps per row on the subscriber's tables (enabled ALWAYS, so it
fires in the sync workers), and held at its start by a lock the test takes
on the subscriber's tables and releases once attach has seen the workers
and the tables that wait for one: no timed sleep decides what is seen.
What the job shows: docs/json.md, "Logical replication's initial sync"."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path

import psycopg
import pytest
from logical import (
    LOCK_ALL,
    NAP,
    TABLES,
    big_copying_on_publisher,
    check_publisher_run,
    check_subscriber_run,
    databases,
    failing_databases,
    follow_failing_sync,
    server_major,
    start_attach,
    subscribe,
    table_states,
)
from support import (
    Lines,
    dump_held_at_start,
    monitor_replay,
    pgparmon_cmd,
    publisher_and_subscriber,
    tick_until,
    wait_for_monitor,
)

from pgparmon.cluster import Cluster, start_cluster
from pgparmon.connect import ConnTarget
from pgparmon.exitcodes import ExitCode
from pgparmon.job_end import NO_MEMBERS_SAMPLES
from pgparmon.jobs.logical_sync_limits import origins_short
from pgparmon.jobs.logical_sync_publisher import HANDOVER_S
from pgparmon.jobs.registry import driver_for
from pgparmon.open_job import wait_for_job
from pgparmon.pick import list_jobs

integration = pytest.mark.integration

SECRET = "sEcReT-pw-25"


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Cluster, Cluster]]:
    # the whole statement a session runs in pg_stat_activity.query (the
    # sample's, with a driver's part, is over 10,000 characters)
    with publisher_and_subscriber(sub_settings={"max_sync_workers_per_subscription": "2",
                                                "track_activity_query_size": "32768"}) \
            as both:
        yield both


@integration
def test_initial_sync_followed_from_the_subscriber(servers: tuple[Cluster, Cluster],
                                                   tmp_path: Path) -> None:
    pub, sub = servers
    rec = tmp_path / "sync.pgparmon.gz"
    databases(pub, sub)
    # the lock holds every table's sync at its start: two workers (the
    # setting) wait on it, the other two tables wait for a worker
    hold = psycopg.connect(sub.conninfo("dst"))
    hold.execute(LOCK_ALL)
    attach: Lines | None = None
    try:
        subscribe(pub, sub, "", f"password={SECRET}")
        attach = Lines(start_attach(sub, "dst", "--record", str(rec)))
        first = attach.wait_for(lambda d: (d["job"].get("tables") or {}).get("waiting") == 2
                                and len(d["workers"]) == 2,
                                "two tables waiting while two sync workers hold a table each")
        hold.rollback()
        job = first["job"]
        assert job["kind"] == "logical_sync" and job["subscription"] == "s"
        assert job["sync_workers"] == 2 and job["database"] == "dst"
        assert {t["state"] for t in job["tables_not_ready"]} == {"waiting", "copying"}
        samples, summary, err = attach.finish(timeout=180)
        states = table_states(sub, "dst")
    finally:
        hold.close()
        if attach is not None and attach.proc.poll() is None:
            attach.proc.kill()
        # its apply worker would hold a worker slot through the later tests
        sub.psql("DROP SUBSCRIPTION IF EXISTS s", dbname="dst")
    assert attach.proc.returncode == 0, err[-2000:]
    # the end: every table ready on the subscriber, and the job said finished;
    # every table's state as it went; progress only grows, to 1
    assert states == "r"
    check_subscriber_run(samples, summary)
    # sizes from the publisher's catalog through the subscription's own
    # connection string, which is shown nowhere (its password least of all)
    basis = samples[-1]["job"]["progress_basis"]
    assert basis.startswith("publisher catalog (subscription's connection")
    assert SECRET not in "".join(str(d) for d in samples) + err
    # an ETA by half the run
    half = [d for d in samples if d["job"]["progress"] is not None
            and 0.0 < d["job"]["progress"] <= 0.5]
    assert any(d["job"]["eta_s"] is not None for d in half), \
        [(d["job"]["progress"], d["job"]["eta_reason"]) for d in half]
    # the recording replays to the same samples (the part travels in it)
    replayed, rsummary, _mon = monitor_replay(rec)
    assert [d["job"]["tables"] for d in replayed] == [d["job"]["tables"] for d in samples]
    assert [d["job"]["progress"] for d in replayed] == [d["job"]["progress"] for d in samples]
    assert rsummary["state"] == "finished"
    # the report renders it with no special case
    rep = subprocess.run(pgparmon_cmd("report", str(rec)), capture_output=True, text=True,
                         timeout=120)
    assert rep.returncode == 0 and "logical_sync" in rep.stdout, rep.stderr[-1000:]


@integration
def test_no_subscription_is_no_job(servers: tuple[Cluster, Cluster]) -> None:
    _pub, sub = servers
    sub.psql("CREATE DATABASE nosub")
    p = start_attach(sub, "nosub")
    out, err = p.communicate(timeout=120)
    assert p.returncode == ExitCode.NO_JOB
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "no running" in err and out == ""


@integration
def test_sync_failing_and_waiting_for_a_worker_slot(servers: tuple[Cluster, Cluster]) -> None:
    """A subscriber whose max_logical_replication_workers leaves one sync
    worker beside the apply worker (tables wait for a slot: named, with the
    setting), and a table whose sync keeps failing (a row of the subscriber's
    own violates its unique key: shown failing, with the table and the
    count; the job stays running, never finished)."""
    pub, _sub = servers
    sub = start_cluster(settings={"max_logical_replication_workers": "2",
                                  "max_sync_workers_per_subscription": "2",
                                  "wal_retrieve_retry_interval": "100ms"},
                        prefix="pgparmon-sub2-")
    attach: Lines | None = None
    try:
        failing_databases(pub, sub, "2")
        hold = psycopg.connect(sub.conninfo("dst2"))
        hold.execute("LOCK TABLE one, two, dup IN SHARE MODE")
        try:
            subscribe(pub, sub, "2")
            attach = Lines(start_attach(sub, "dst2"))
            slots = attach.wait_for(lambda d: d["bottleneck"]["kind"] == "worker-slots",
                                    "tables waiting for a worker slot, named")
        finally:
            hold.close()
        assert "max_logical_replication_workers = 2" in slots["bottleneck"]["detail"]
        assert slots["job"]["tables"]["waiting"] == 2 and len(slots["workers"]) == 1
        # the failing table, named; the others get through; the row goes
        follow_failing_sync(attach, sub, "dst2", server_major(sub))
    finally:
        if attach is not None and attach.proc.poll() is None:
            attach.proc.kill()
        sub.stop()


@integration
def test_the_exporter_serves_a_sync_of_another_database(servers: tuple[Cluster, Cluster]) -> None:
    """`pgparmon exporter` connected to the subscriber's postgres database
    finds a sync of another database from its discovery query (a job the
    server runs: no process scan), follows it there, and serves its series
    to the end; held at its start by the test's lock as above."""
    from test_exporter import exporter

    pub, sub = servers
    databases(pub, sub, "3", scale=1 / 3)  # the nap: its COPY is seen as it goes
    sync = {"kind": "logical_sync", "database": "dst3", "tool": "logical_sync"}
    hold = psycopg.connect(sub.conninfo("dst3"))
    hold.execute(LOCK_ALL)
    try:
        with exporter(sub, interval="0.3") as exp:
            exp.wait_for("pgparmon_server_up", server=exp.server)
            subscribe(pub, sub, "3")
            exp.wait_for("pgparmon_job_state", state="running", **sync)
            # the sync's own figures: its table count, its sync worker count
            exp.wait_for("pgparmon_job_items", len(TABLES), **sync)
            assert exp.value("pgparmon_job_workers", **sync) == 2
            hold.rollback()
            exp.wait_for("pgparmon_job_state", state="finished", timeout=120, **sync)
            assert exp.value("pgparmon_job_progress_ratio", **sync) == 1.0
            assert exp.value("pgparmon_job_items_done", **sync) == len(TABLES)
            assert (exp.value("pgparmon_job_bytes", **sync) or 0) > 0
            assert (exp.value("pgparmon_job_rows", **sync) or 0) > 0
            assert exp.value("pgparmon_last_success_time_seconds", server=exp.server,
                             database="dst3", kind="logical_sync") is not None
            code, err = exp.stop()
    finally:
        hold.close()
        sub.psql("DROP SUBSCRIPTION IF EXISTS s3", dbname="dst3")  # its worker slot
    assert code == 0 and "Traceback" not in err, err[-2000:]
    # followed once, from the discovery query
    assert err.count("following logical_sync of s3") == 1, err[-2000:]


@integration
def test_initial_sync_found_from_the_publisher(servers: tuple[Cluster, Cluster]) -> None:
    """`attach -d PUBDB` on the publisher finds the sync as one job from its
    sync walsenders (pg_<suboid>_sync_<relid>_<sysid>, COPY ... TO STDOUT):
    each table's COPY TO progress against the publisher's own pg_class
    sizes; the tables still to come are the subscriber's to list (total
    unknown, no ETA); it ends once no sync walsender and no sync slot of
    its is left (test_a_publisher_side_sync_ends_once_its_slots_are_gone)."""
    pub, sub = servers
    databases(pub, sub, "4")
    attach = Lines(start_attach(pub, "src4", "--wait", "60"))
    try:
        # attach samples the publisher before the sync starts: it sees the
        # big table's COPY TO however slow its own start
        wait_for_monitor(pub, attach.proc, "src4")
        subscribe(pub, sub, "4")
        suboid = sub.psql("SELECT oid FROM pg_subscription WHERE subname = 's4'").strip()
        copying = attach.wait_for(big_copying_on_publisher,
                                  "the big table's COPY TO, with its progress")
        samples, summary, err = attach.finish(timeout=180)
        # never finished while a table waits for its sync: here the earlier
        # tests' subscriptions leave the sync one worker slot, and a launch
        # that finds it still held is retried only wal_retrieve_retry_interval
        # (5 s) later (with a 3 s hand-over the job ended with 3 of 4 tables
        # still in state i)
        waiting = sub.psql("SELECT count(*) FROM pg_subscription_rel r JOIN pg_subscription s "
                           "ON s.oid = r.srsubid WHERE s.subname = 's4' "
                           "AND r.srsubstate NOT IN ('r', 's')", dbname="dst4").strip()
    finally:
        if attach.proc.poll() is None:
            attach.proc.kill()
        sub.psql("DROP SUBSCRIPTION IF EXISTS s4", dbname="dst4")  # none left syncing
    assert attach.proc.returncode == 0, err[-2000:]
    assert waiting == "0", f"{waiting} table(s) not synced when the job ended"
    check_publisher_run(pub, "src4", suboid, copying, samples, summary)


@integration
def test_publisher_restarted_mid_copy(servers: tuple[Cluster, Cluster]) -> None:
    """The publisher restarts while the big table copies: its sync worker
    (and the apply worker) lose their connection and start over after
    wal_retrieve_retry_interval. The job says the table's sync failed, with
    the apply worker's restart (the connection to the publisher lost), keeps
    following, and finishes when every table is ready."""
    pub, sub = servers
    databases(pub, sub, "5")
    attach = Lines(start_attach(sub, "dst5", "--wait", "60"))
    try:
        subscribe(pub, sub, "5")
        attach.wait_for(lambda d: any(w["phase"] == "copy" and w["relation"] == "public.big"
                                      for w in d["workers"]), "the big table copying")
        pub.restart("fast")
        failing = attach.wait_for(
            lambda d: d["bottleneck"]["kind"] == "sync-failing"
            and any(t["table"] == "public.big" and t["failures"] >= 1
                    for t in d["job"]["tables_not_ready"]), "the big table's sync failed")
        samples, summary, err = attach.finish(timeout=180)
        states = table_states(sub, "dst5")
    finally:
        if attach.proc.poll() is None:
            attach.proc.kill()
        sub.psql("DROP SUBSCRIPTION IF EXISTS s5", dbname="dst5")  # none left syncing
    assert failing["job"]["state"] == "running" and failing["job"]["apply_restarts"] >= 1
    assert "connection to the publisher" in failing["bottleneck"]["detail"]
    assert attach.proc.returncode == 0 and summary["state"] == "finished", err[-2000:]
    assert samples[-1]["job"]["tables"]["ready"] == len(TABLES)
    assert states == "r"  # the subscriber's own word, before the subscription went


@integration
def test_publisher_max_replication_slots_too_low(servers: tuple[Cluster, Cluster]) -> None:
    """A publisher whose max_replication_slots leaves one slot beside the
    apply worker's: the second sync worker cannot create its slot and
    starts over and over. The job names the publisher's setting, with its
    value, read with the publisher's table sizes."""
    _pub, sub = servers
    pub = start_cluster(settings={"wal_level": "logical", "max_replication_slots": "2"},
                        prefix="pgparmon-pub6-")
    attach: Lines | None = None
    try:
        databases(pub, sub, "6")
        attach = Lines(start_attach(sub, "dst6", "--wait", "60"))
        subscribe(pub, sub, "6")
        short = attach.wait_for(lambda d: d["bottleneck"]["kind"] == "worker-slots"
                                and "publisher" in d["bottleneck"]["detail"],
                                "the publisher's slots named")
        assert "max_replication_slots = 2" in short["bottleneck"]["detail"]
        assert short["job"]["state"] == "running"
    finally:
        if attach is not None and attach.proc.poll() is None:
            attach.proc.kill()
        sub.psql("DROP SUBSCRIPTION IF EXISTS s6", dbname="dst6")
        pub.stop()


def _last_statement(sub: Cluster, pid: int) -> str:
    """What a session ran last, as the server says (pg_stat_activity.query)."""
    return sub.psql(f"SELECT query FROM pg_stat_activity WHERE pid = {pid}")


@integration
def test_a_known_job_samples_its_own_drivers_parts_alone(servers: tuple[Cluster, Cluster],
                                                         tmp_path: Path) -> None:
    """Discovery reads every driver's parts; once the job is known its
    samples read its driver's alone. A pg_dump on the subscriber, beside a
    subscription syncing in another database: attach's discovery finds both
    (the subscription's from its part), the dump's samples then run no
    subscription query (the statement the server saw last from the monitor's
    session) and sample no sync worker; the sync's own samples run its
    part."""
    pub, sub = servers
    databases(pub, sub, "7", scale=1 / 3)
    sub.psql("CREATE DATABASE dumped")
    sub.psql("CREATE TABLE orders (id int, v text); INSERT INTO orders SELECT g, 'x' "
             "FROM generate_series(1, 1000) g;", dbname="dumped")
    # the sync waits at its start on a lock a sibling psql holds (a session
    # of the test's own process in a transaction would make the dump a
    # step of the test's job)
    try:
        with _locked_by_psql(sub, "dst7", TABLES):
            subscribe(pub, sub, "7")
            with dump_held_at_start(sub, "dumped", tmp_path / "d") as held:
                target = ConnTarget(host=str(sub.sockdir), port=sub.port, user=sub.superuser,
                                    dbname="dumped")
                # discovery (the picker's list): every driver's parts, the sync
                # of dst7 found from its own
                _discovered(target, {"pg_dump", "logical_sync"})
                workers = int(sub.psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type "
                                       "~ '^logical replication'"))
                assert workers >= 2  # the apply worker and a sync worker at least
                mon = wait_for_job(target, pid=held.proc.pid, wait_s=30, interval=0.3)
                try:
                    assert mon.job is not None and mon.job.kind == "pg_dump"
                    sampler = mon.source.sampler
                    assert (sampler.parts, sampler.server_types) == ((), ())
                    mon.tick()
                    snap = mon.snaps[-1]
                    assert snap.db is not None and snap.db.parts is None
                    assert not any(b.backend_type.startswith("logical replication")
                                   for b in snap.db.backends)
                    sampler.sample([])
                    seen = _last_statement(sub, sampler.facts.backend_pid)
                    assert "pg_stat_progress_copy" in seen and "pg_subscription" not in seen, seen
                finally:
                    mon.close()
            # the sync's own samples: its part and its sync workers
            sync = wait_for_job(ConnTarget(host=str(sub.sockdir), port=sub.port,
                                           user=sub.superuser, dbname="dst7"),
                                pid=None, wait_s=30, interval=0.3)
            try:
                assert sync.job is not None and sync.job.kind == "logical_sync"
                sampler = sync.source.sampler
                own = driver_for("logical_sync")
                assert (sampler.parts, sampler.server_types) == (
                    (*own.sample_parts, *own.follow_parts), own.backend_types)
                # its part (the tables' states) and its sync workers (as many
                # as the earlier tests' subscriptions leave worker slots for)
                doc = tick_until(sync, lambda d: d["job"]["tables"]["waiting"] is not None
                                 and bool(d["workers"]), ticks=100, pause=0.3)[-1]
                assert doc["job"]["subscription"] == "s7"
                assert sum(doc["job"]["tables"].values()) == len(TABLES)
                snap = sync.snaps[-1]
                assert snap.db is not None and [s["name"] for s in snap.db.parts["logical_sync"]
                                                if s["datname"] == "dst7"] == ["s7"]
                sampler.sample([])
                assert "pg_subscription" in _last_statement(sub, sampler.facts.backend_pid)
            finally:
                sync.close()
    finally:
        sub.psql("DROP SUBSCRIPTION IF EXISTS s7", dbname="dst7")


@integration
def test_a_publisher_side_sync_ends_once_its_slots_are_gone(
        servers: tuple[Cluster, Cluster]) -> None:
    """On the publisher a table's sync slot lives from its sync's start to
    its end, a failed sync's until its retry (14+), while no walsender of
    its is left. A table whose sync keeps failing on the subscriber (a row
    of the subscriber's own violates its unique key; retried after
    wal_retrieve_retry_interval, 5 s): the publisher's job keeps running
    between the attempts on its slot alone, and once the row goes and the
    table is synced, ends HANDOVER_S after its last slot went (and
    NO_MEMBERS_SAMPLES samples), not PUBLISHER_GRACE_S."""
    pub, sub = servers
    # the nap: one's walsender is seen for seconds (the job found), dup's
    # attempts are short (no walsender of its for most of the retry's wait)
    rows = {"one": 1500, "dup": 100}
    pub.psql("CREATE DATABASE src8")
    sub.psql("CREATE DATABASE dst8")
    schema = "".join(f"CREATE TABLE {t} (id int UNIQUE, v text);" for t in rows)
    pub.psql(schema + "".join(f"INSERT INTO {t} SELECT g, 'x' FROM generate_series(1, {n}) g;"
                              for t, n in rows.items())
             + "ANALYZE; CREATE PUBLICATION p8 FOR ALL TABLES;", dbname="src8")
    sub.psql(schema + NAP + "".join(
        f"CREATE TRIGGER nap BEFORE INSERT ON {t} FOR EACH ROW EXECUTE FUNCTION nap(); "
        f"ALTER TABLE {t} ENABLE ALWAYS TRIGGER nap;" for t in rows)
        + "INSERT INTO dup VALUES (90, 'the subscriber''s own')", dbname="dst8")
    attach = Lines(start_attach(pub, "src8", "--wait", "60"))
    try:
        subscribe(pub, sub, "8")
        attach.wait_for(lambda d: d["job"].get("side") == "publisher", "the sync, found")
        # the subscriber's word: the other table synced, then dup's sync
        # failed twice more (a retry's wait with no other table syncing)
        _wait_on(sub, "SELECT count(*) FROM pg_subscription_rel WHERE srsubstate = 'r'", 1)
        errors = "SELECT sync_error_count FROM pg_stat_subscription_stats WHERE subname = 's8'"
        _wait_on(sub, errors, int(sub.psql(errors, dbname="dst8").strip() or 0) + 2)
        fixed = time.time()
        sub.psql("DELETE FROM dup WHERE id = 90", dbname="dst8")
        samples, summary, err = attach.finish(timeout=180)
    finally:
        if attach.proc.poll() is None:
            attach.proc.kill()
        sub.psql("DROP SUBSCRIPTION IF EXISTS s8", dbname="dst8")
    assert attach.proc.returncode == 0 and summary["state"] == "finished", err[-2000:]
    # running until the failing table got through (after the fix), never before
    trail = [(d["elapsed_s"], d["job"]["state"], len(d["workers"]), d["job"]["sync_slots"])
             for d in samples]
    assert datetime.fromisoformat(samples[-1]["ts"]).timestamp() > fixed, trail[-20:]
    assert all(d["job"]["state"] == "running" for d in samples[:-1])
    # between two attempts no walsender of its: the slot kept it running
    assert any(not d["workers"] and (d["job"]["sync_slots"] or 0) >= 1 for d in samples)
    # the end: the first sample HANDOVER_S after the last one with a
    # walsender or a slot, then NO_MEMBERS_SAMPLES - 1 samples more (a
    # sample within the clock's millisecond of that boundary may count
    # either side of it)
    last = max(i for i, d in enumerate(samples) if d["workers"] or d["job"]["sync_slots"])
    wall = [datetime.fromisoformat(d["ts"]).timestamp() for d in samples]

    def past(limit: float) -> int | None:
        return next((i for i in range(last + 1, len(samples))
                     if wall[i] - wall[last] >= limit), None)

    ends = {p + NO_MEMBERS_SAMPLES - 1 for p in (past(HANDOVER_S - 0.002),
                                                past(HANDOVER_S + 0.002)) if p is not None}
    assert len(samples) - 1 in ends, (ends, trail[last:])


def _wait_on(sub: Cluster, sql: str, at_least: int) -> None:
    """Until the subscriber's dst8 answers sql with a count of at least that."""
    for _ in range(900):
        if int(sub.psql(sql, dbname="dst8").strip() or 0) >= at_least:
            return
        time.sleep(0.2)
    raise AssertionError(f"never {at_least}: {sql}")


@contextlib.contextmanager
def _locked_by_psql(cl: Cluster, dbname: str, tables: Iterable[str]) -> Iterator[None]:
    """The tables locked IN SHARE MODE by a psql of its own (not a session
    of the test's process) until the block ends."""
    app = f"pgparmon-test-hold-{time.time_ns()}"
    hold = subprocess.Popen([cl.client("psql"), "-X", "-q", "-d", dbname, "-c",
                             "BEGIN; LOCK TABLE " + ", ".join(tables) + " IN SHARE MODE; "
                             "SELECT pg_sleep(600)"], env={**cl.env(), "PGAPPNAME": app},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            if cl.psql("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                       f"WHERE a.application_name = '{app}' AND l.granted "
                       "AND l.mode = 'ShareLock' AND l.locktype = 'relation'").strip() != "0":
                break
            assert hold.poll() is None, "the psql holding the lock exited"
            time.sleep(0.1)
        yield
    finally:
        cl.psql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                f"WHERE application_name = '{app}'")
        hold.wait(timeout=30)


def _discovered(target: ConnTarget, kinds: set[str]) -> None:
    """Discovery (the picker's list) looked at until it finds jobs of those
    kinds among the server's."""
    have: list[str] = []
    for _ in range(100):
        have = [f.job.kind for f in list_jobs(target)]
        if kinds <= set(have):
            return
        time.sleep(0.2)
    raise AssertionError(f"discovery never found {kinds}: {have}")


def test_origins_short_reads_the_versions_setting() -> None:
    """The subscriber's origin limit by the name its version reads (the
    sample part asks for both names; a server has one of them). With real
    servers of both kinds: tests/test_logical_sync_versions.py (16, 18)."""
    part = {"subid": 1, "origins": 3,
            "settings": {"max_replication_slots": "10", "max_active_replication_origins": "4"}}
    short = origins_short(part, 2)
    assert short and "max_active_replication_origins = 4 with 3 other" in short
    assert "leaves 1 for 2 sync worker(s)" in short and "before PostgreSQL 18" not in short
    part["settings"] = {"max_replication_slots": "4"}  # before 18
    short = origins_short(part, 2)
    assert short and "max_replication_slots = 4 (max_replication_slots counts" in short
    assert origins_short(part, 1) is None
    assert origins_short({**part, "origins": None}, 2) is None  # not read
    assert origins_short({**part, "settings": None}, 2) is None
