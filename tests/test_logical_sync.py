"""Logical replication's initial sync, followed with real servers: a
publisher (wal_level=logical) and a subscriber, tables of uneven sizes with
and without indexes, a subscription with copy_data. The sync is slowed by a
trigger that naps per row on the subscriber's tables (enabled ALWAYS, so it
fires in the sync workers), and held at its start by a lock the test takes
on the subscriber's tables and releases once attach has seen the workers
and the tables that wait for one: no timed sleep decides what is seen.
What the job shows: docs/json.md, "Logical replication's initial sync"."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from logical import (
    LOCK_ALL,
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
from support import Lines, monitor_replay, pgparmon_cmd, publisher_and_subscriber, wait_for_monitor

from pgparmon.cluster import Cluster, start_cluster
from pgparmon.exitcodes import ExitCode
from pgparmon.jobs.logical_sync_limits import origins_short

integration = pytest.mark.integration

SECRET = "sEcReT-pw-25"


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Cluster, Cluster]]:
    with publisher_and_subscriber(sub_settings={"max_sync_workers_per_subscription": "2"}) \
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
    finally:
        hold.close()
        if attach is not None and attach.proc.poll() is None:
            attach.proc.kill()
    assert attach.proc.returncode == 0, err[-2000:]
    # the end: every table ready on the subscriber, and the job said finished;
    # every table's state as it went; progress only grows, to 1
    assert table_states(sub, "dst") == "r"
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
    assert code == 0 and "Traceback" not in err, err[-2000:]
    # followed once, from the discovery query
    assert err.count("following logical_sync of s3") == 1, err[-2000:]


@integration
def test_initial_sync_found_from_the_publisher(servers: tuple[Cluster, Cluster]) -> None:
    """`attach -d PUBDB` on the publisher finds the sync as one job from its
    sync walsenders (pg_<suboid>_sync_<relid>_<sysid>, COPY ... TO STDOUT):
    each table's COPY TO progress against the publisher's own pg_class
    sizes; the tables still to come are the subscriber's to list (total
    unknown, no ETA); it ends once no sync walsender is left (for
    PUBLISHER_GRACE_S: the next table's starts within that)."""
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
    finally:
        if attach.proc.poll() is None:
            attach.proc.kill()
        sub.psql("DROP SUBSCRIPTION IF EXISTS s4", dbname="dst4")  # none left syncing
    assert attach.proc.returncode == 0, err[-2000:]
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
