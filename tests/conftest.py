"""A throwaway PostgreSQL cluster per test session (initdb/pg_ctl from the
server binaries on the machine, free port, socket in a temp dir, fsync off),
and a skewed sample database to dump and restore."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgparmon.cluster import Cluster, start_cluster
from pgparmon.demo import sample_sql

# Big enough that pg_dump -j 2 runs for a few seconds on a 2-core machine.
TEST_SCALE = float(os.environ.get("PGPARMON_TEST_SCALE", "0.6"))


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    cl = start_cluster(prefix="pgparmon-test-")
    try:
        yield cl
    finally:
        cl.stop()


@pytest.fixture(scope="session")
def sample_db(cluster: Cluster) -> str:
    cluster.psql("CREATE DATABASE sample")
    cluster.psql(sample_sql(TEST_SCALE, small_tables=8), dbname="sample")
    return "sample"


@pytest.fixture()
def workdir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="pgparmon-t-"))
    os.chmod(d, 0o777)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def dump_archive(cluster: Cluster, sample_db: str) -> Iterator[Path]:
    """A finished -Fd archive of the sample database, to restore from."""
    d = Path(tempfile.mkdtemp(prefix="pgparmon-archive-"))
    out = d / "sample.dump"
    subprocess.run([cluster.client("pg_dump"), "-Fd", "-j", "2", "-f", str(out), sample_db],
                   env=cluster.env(), check=True, capture_output=True)
    try:
        yield out
    finally:
        shutil.rmtree(d, ignore_errors=True)
