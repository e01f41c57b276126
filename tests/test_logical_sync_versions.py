"""Logical replication's initial sync on other major versions than the
machine's: a publisher and a subscriber of that version (binaries from
tests/pgversions.py), 16 and 18 by default (PGPARMON_SYNC_PG_VERSIONS
chooses, e.g. 14,16,17,18). tests/test_logical_sync.py tells the whole story
on the machine's version (15); here, what differs by version, kept short:
the sync workers' backend type (17+: `logical replication tablesync
worker`), pg_stat_subscription (16+: leader_pid; 17+: worker_type), the
sync walsenders on the publisher and their COPY TO progress,
pg_stat_subscription_stats.sync_error_count (15+; null before) and the
query bands each version picks."""

from __future__ import annotations

import os
from collections.abc import Iterator

import psycopg
import pytest
from logical import (
    LOCK_ALL,
    big_copying_on_publisher,
    check_publisher_run,
    check_subscriber_run,
    databases,
    failing_databases,
    follow_failing_sync,
    follow_origins_short,
    start_attach,
    subscribe,
    table_states,
)
from pgversions import bindir_for
from support import Lines, publisher_and_subscriber, wait_for_monitor

from pgparmon import sql
from pgparmon.cluster import Cluster

pytestmark = pytest.mark.integration

VERSIONS = [int(v) for v in os.environ.get("PGPARMON_SYNC_PG_VERSIONS", "16,18").split(",")
            if v.strip()]


@pytest.fixture(scope="module", params=VERSIONS, ids=[f"pg{v}" for v in VERSIONS])
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[int, Cluster, Cluster]]:
    """A publisher and a subscriber of one major version; a failed sync is
    retried after 100 ms (wal_retrieve_retry_interval)."""
    major = int(request.param)
    with publisher_and_subscriber(sub_settings={"max_sync_workers_per_subscription": "2",
                                                "wal_retrieve_retry_interval": "100ms"},
                                  bindir=bindir_for(major)) as (pub, sub):
        yield major, pub, sub


def test_sync_from_both_sides(pair: tuple[int, Cluster, Cluster]) -> None:
    """One sync followed at once from the subscriber (attach -d dst) and
    from the publisher (attach -d src): held at its start by the test's
    lock on the subscriber's tables (two sync workers wait on it, two
    tables wait for a worker), then let go to its end."""
    major, pub, sub = pair
    databases(pub, sub)
    on_pub = Lines(start_attach(pub, "src", "--wait", "60"))
    on_sub: Lines | None = None
    hold = psycopg.connect(sub.conninfo("dst"))
    try:
        wait_for_monitor(pub, on_pub.proc, "src")  # sampling before the sync starts
        hold.execute(LOCK_ALL)
        subscribe(pub, sub, "")
        on_sub = Lines(start_attach(sub, "dst"))
        first = on_sub.wait_for(lambda d: (d["job"].get("tables") or {}).get("waiting") == 2
                                and len(d["workers"]) == 2,
                                "two tables waiting while two sync workers hold a table each")
        # the workers are the server's tablesync workers, by this version's name
        types = sub.psql("SELECT string_agg(DISTINCT backend_type, ',') FROM pg_stat_activity "
                         "WHERE pid IN (" + ",".join(str(w["pid"]) for w in first["workers"])
                         + ")").strip()
        hold.rollback()
        copying = on_pub.wait_for(big_copying_on_publisher,
                                  "the big table's COPY TO on the publisher, with its progress")
        samples, summary, err = on_sub.finish(timeout=180)
        pub_samples, pub_summary, pub_err = on_pub.finish(timeout=180)
        suboid = sub.psql("SELECT oid FROM pg_subscription WHERE subname = 's'").strip()
        version_num = int(sub.psql("SHOW server_version_num").strip())
        states = table_states(sub, "dst")  # before the subscription goes
    finally:
        hold.close()
        for att in (on_sub, on_pub):
            if att is not None and att.proc.poll() is None:
                att.proc.kill()
        # its apply worker would hold a worker slot and an origin in the next tests
        sub.psql("DROP SUBSCRIPTION IF EXISTS s", dbname="dst")
    assert types == ("logical replication tablesync worker" if major >= 17
                     else "logical replication worker")
    assert version_num // 10000 == major
    assert samples[0]["server"]["version"].startswith(str(major))
    # this version's bands: the sample's (17+: pg_stat_checkpointer) and the
    # sync's part (15+: pg_stat_subscription_stats)
    assert sql.band("sample", version_num) == (170000 if major >= 17 else 140000)
    assert sql.band("logical_sync", version_num) == (150000 if major >= 15 else 100000)
    job = first["job"]
    assert job["kind"] == "logical_sync" and job["subscription"] == "s"
    assert job["sync_workers"] == 2 and job["side"] == "subscriber"
    assert {t["state"] for t in job["tables_not_ready"]} == {"waiting", "copying"}
    # no sync failed: a count of none from 15 on, no count before
    assert job["sync_errors"] == (0 if major >= 15 else None)
    assert on_sub.proc.returncode == 0, err[-2000:]
    assert states == "r"
    check_subscriber_run(samples, summary)
    assert samples[-1]["job"]["progress_basis"].startswith(
        "publisher catalog (subscription's connection")
    assert on_pub.proc.returncode == 0, pub_err[-2000:]
    check_publisher_run(pub, "src", suboid, copying, pub_samples, pub_summary)


def test_failing_sync(pair: tuple[int, Cluster, Cluster]) -> None:
    """A table whose sync keeps failing (a row the subscriber has already
    violates its unique key): shown failing with the table and its count,
    and sync_error_count where the version has it; the job finishes once
    the row goes."""
    major, pub, sub = pair
    failing_databases(pub, sub, "f")
    att = Lines(start_attach(sub, "dstf", "--wait", "60"))
    try:
        subscribe(pub, sub, "f")
        follow_failing_sync(att, sub, "dstf", major)
    finally:
        if att.proc.poll() is None:
            att.proc.kill()
        sub.psql("DROP SUBSCRIPTION IF EXISTS sf", dbname="dstf")


def test_replication_origins_short(pair: tuple[int, Cluster, Cluster]) -> None:
    """The subscriber's replication origins (18+: max_active_replication_origins;
    before: max_replication_slots) leave one sync worker an origin: the
    other's sync fails and starts over, named with the version's setting.
    (The tests before drop their subscriptions: their apply workers would
    take the worker slots the second sync worker needs.)"""
    major, pub, sub = pair
    follow_origins_short(pub, sub, "o", major)
