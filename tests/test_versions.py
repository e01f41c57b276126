"""The integration subset on every supported major version (14 to 18), with
that version's own pg_dump and pg_restore. The full suite runs on the
machine's version (15); set PGPARMON_PG_VERSIONS to choose the others."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pgversions import bindir_for
from support import attach_while_held, pgparmon_cmd, read_jsonl, wait_for_backends

from pgparmon import sql
from pgparmon.cluster import Cluster, start_cluster
from pgparmon.connect import ConnTarget
from pgparmon.demo import sample_sql
from pgparmon.readers.db import DbSampler

pytestmark = pytest.mark.integration

VERSIONS = [int(v) for v in os.environ.get("PGPARMON_PG_VERSIONS", "14,16,17,18").split(",")
            if v.strip()]


@pytest.fixture(scope="module", params=VERSIONS, ids=[f"pg{v}" for v in VERSIONS])
def versioned(request: pytest.FixtureRequest) -> Iterator[tuple[int, Cluster, Path]]:
    """A cluster of one major version with a small sample database and an
    -Fd archive of it; one version at a time (module scope, params)."""
    major = int(request.param)
    t0 = time.monotonic()
    cl = start_cluster(bindir=bindir_for(major), prefix=f"pgparmon-v{major}-")
    work = Path(tempfile.mkdtemp(prefix=f"pgparmon-v{major}-out-"))
    os.chmod(work, 0o777)
    try:
        cl.psql("CREATE DATABASE sample")
        cl.psql(sample_sql(0.3, small_tables=6), dbname="sample")
        subprocess.run([cl.client("pg_dump"), "-Fd", "-j", "2", "-f", str(work / "a"), "sample"],
                       env=cl.env(), check=True, capture_output=True)
        yield major, cl, work
    finally:
        cl.stop()
        shutil.rmtree(work, ignore_errors=True)
        print(f"\nPostgreSQL {major}: {time.monotonic() - t0:.0f} s")


def _samples(out: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    docs = read_jsonl(out)
    samples = [d for d in docs if d.get("schema") == "pgparmon.sample/1"]
    summary = [d for d in docs if d.get("schema") == "pgparmon.summary/1"]
    assert samples and len(summary) == 1, out[-2000:]
    return samples, summary[0]  # type: ignore[return-value]


def _monotone_to_one(samples: list[dict[str, Any]]) -> None:
    prog = [s["job"]["progress"] for s in samples if s["job"]["progress"] is not None]
    assert prog and all(b >= a for a, b in zip(prog, prog[1:])) and prog[-1] == 1.0, prog


def test_facts_band_and_sample(versioned: tuple[int, Cluster, Path]) -> None:
    major, cl, _ = versioned
    s = DbSampler(ConnTarget(host=str(cl.sockdir), port=cl.port, user="postgres",
                             dbname="sample"))
    facts = s.open()
    try:
        assert facts.major == major
        assert sql.band("sample", facts.version_num) == (170000 if major >= 17 else 140000)
        assert facts.has_copy_progress and facts.has_index_progress
        assert facts.missing_views() == []
        db = s.sample()
        assert db.error is None and db.copies is not None and db.indexes is not None
        # checkpoints: pg_stat_bgwriter before 17, pg_stat_checkpointer from 17
        assert db.checkpoints is not None and min(db.checkpoints) >= 0
        # a backup's waits: the WAL position, the segment size, the checkpoint's pacing
        assert db.wal is not None and db.wal[0] and db.wal[1] == 16 << 20
        assert db.wal[2] and db.wal[3] and db.archiver is not None and len(db.archiver) == 6
        assert s.query_json("tables") and s.query_json("done") is not None
        assert set(s.query_json("postdata")) == {"indexes", "fks"}
        assert s.query_json("locks", {"pid": facts.backend_pid}) is not None
    finally:
        s.close()


def test_run_dump(versioned: tuple[int, Cluster, Path]) -> None:
    major, cl, work = versioned
    res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.3", "--",
                                      cl.client("pg_dump"), "-Fd", "-j", "2", "-f",
                                      str(work / f"d{time.monotonic_ns()}"), "sample"),
                         capture_output=True, text=True, env=cl.env(), timeout=180)
    assert res.returncode == 0, res.stderr
    samples, summary = _samples(res.stdout)
    assert samples[0]["job"]["kind"] == "pg_dump" and samples[0]["job"]["jobs"] == 2
    assert samples[0]["server"]["version"].startswith(str(major))
    assert summary["state"] == "finished"
    assert all(i["state"] == "done" for i in summary["items"])
    assert any(w["phase"] == "copy" for s in samples for w in s["workers"])
    _monotone_to_one(samples)


def test_run_basebackup(versioned: tuple[int, Cluster, Path]) -> None:
    """A throttled pg_basebackup of this version's server, with this
    version's client: its phases from pg_stat_progress_basebackup, streamed
    bytes of the estimate to the end."""
    major, cl, work = versioned
    res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.2", "--",
                                      cl.client("pg_basebackup"), "-D",
                                      str(work / f"b{time.monotonic_ns()}"), "-Ft", "-c",
                                      "fast", "-r", "32M"),
                         capture_output=True, text=True, env=cl.env(), timeout=180)
    assert res.returncode == 0, res.stderr
    samples, summary = _samples(res.stdout)
    job = samples[-1]["job"]
    assert job["kind"] == "pg_basebackup" and job["scope"] == "cluster"
    assert samples[0]["server"]["version"].startswith(str(major))
    assert summary["state"] == "finished" and job["exit_code"] == 0
    assert any(w["phase"] == "backup" for s in samples for w in s["workers"])
    assert any((s["job"].get("backup") or {}).get("total_bytes") for s in samples)
    _monotone_to_one(samples)


def _attach_held(cl: Cluster, proc: subprocess.Popen[bytes], dbname: str) -> Any:
    """`pgparmon attach --json -d dbname`, started while the job of proc is
    held (found mid-run however slow its start), followed to its end."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    att = attach_while_held(proc.pid, pgparmon_cmd(
        "attach", "-h", str(cl.sockdir), "-p", str(cl.port), "-U", "postgres", "-d", dbname,
        "--json", "--interval", "0.3"), env)
    return att, *att.finish(timeout=180)


def test_attach_dump(versioned: tuple[int, Cluster, Path]) -> None:
    """A plain `pg_dump -Fd -j 2` of this version found by attach from its
    sessions (this version's sample band), followed to its end."""
    major, cl, work = versioned
    dump = subprocess.Popen([cl.client("pg_dump"), "-Fd", "-j", "2", "-f",
                             str(work / f"ad{time.monotonic_ns()}"), "sample"], env=cl.env())
    wait_for_backends(cl, "sample", "pg_dump", proc=dump)
    att, samples, summary, err = _attach_held(cl, dump, "sample")
    assert dump.wait() == 0
    assert att.proc.returncode == 0, err
    job = samples[0]["job"]
    assert job["kind"] == "pg_dump" and job["jobs"] == 2 and job["client_pid"] == dump.pid
    assert samples[0]["server"]["version"].startswith(str(major))
    assert summary["state"] == "finished"
    assert all(i["state"] == "done" for i in summary["items"])
    assert "public.orders" in {w["relation"] for s in samples for w in s["workers"]
                               if w["phase"] == "copy"}
    _monotone_to_one(samples)


def test_attach_restore(versioned: tuple[int, Cluster, Path]) -> None:
    major, cl, work = versioned
    cl.psql("DROP DATABASE IF EXISTS restored")
    cl.psql("CREATE DATABASE restored")
    rest = subprocess.Popen([cl.client("pg_restore"), "-j", "2", "-d", "restored",
                             str(work / "a")], env=cl.env())
    wait_for_backends(cl, "restored", "pg_restore", proc=rest)
    att, samples, summary, err = _attach_held(cl, rest, "restored")
    assert rest.wait() == 0
    assert att.proc.returncode == 0, err
    assert samples[0]["job"]["kind"] == "pg_restore"
    assert summary["state"] == "finished"
    assert {"data", "index", "constraint"} <= {i["kind"] for i in summary["items"]}
    _monotone_to_one(samples)


def test_advise(versioned: tuple[int, Cluster, Path]) -> None:
    """Static and probed dump advice, and restore advice from this version's
    own archive (read with its own pg_restore)."""
    major, cl, work = versioned
    env = {**cl.env(), "PGPARMON_PGBIN": str(cl.bindir)}
    res = subprocess.run(pgparmon_cmd("advise", "-d", "sample", "--target",
                                      str(work / f"adv{time.monotonic_ns()}"), "--probe",
                                      "--probe-seconds", "3", "--max-jobs", "2", "--json"),
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["server"]["version"].startswith(str(major))
    # this version's advise band ran (17+: pg_stat_checkpointer)
    assert doc["server"]["lock_table_entries"] > 0 and doc["server"]["lockable_tables"] >= 10
    assert doc["basis"] == "probe", doc["warnings"]  # TID range scans on every 14+
    assert doc["inventory"]["largest_item"] == "public.orders"
    res = subprocess.run(pgparmon_cmd("advise", "-d", "postgres", "--archive", str(work / "a"),
                                      "--json"), capture_output=True, text=True, env=env,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["kind"] == "restore" and doc["inventory"]["items"] > doc["inventory"]["tables"]
