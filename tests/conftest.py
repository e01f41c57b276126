"""A throwaway PostgreSQL cluster per test session (initdb/pg_ctl from the
server binaries on the machine, free port, socket in a temp dir, fsync off),
and a skewed sample database to dump and restore.

Only tests marked `integration` may start a cluster: any other test that
does (through these fixtures or pgparmon.cluster directly) fails, so
`pytest -m "not integration"` provably starts none; the run ends with a line
saying how many clusters it started (its workers' together under `-n`:
`./run test` runs the suite in a few pytest-xdist workers, each with its
own session cluster, a test file's tests on one worker).

`--update-golden` (or PGPARMON_UPDATE_GOLDEN=1) rewrites the golden files of
tests/test_golden.py instead of comparing with them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pgparmon import cluster as cluster_mod
from pgparmon.cluster import Cluster, start_cluster
from pgparmon.demo import sample_sql

# Big enough that pg_dump -j 2 runs for a few seconds on a 2-core machine.
TEST_SCALE = float(os.environ.get("PGPARMON_TEST_SCALE", "0.6"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the expected files of the golden tests "
                          "(also PGPARMON_UPDATE_GOLDEN=1)")


@pytest.fixture()
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden")) or \
        os.environ.get("PGPARMON_UPDATE_GOLDEN", "") not in ("", "0")


# ---- only integration tests start clusters ------------------------------------

_running: list[pytest.Item] = []  # the test whose setup, call or teardown runs now
_started: list[str] = []  # nodeids of the tests that started a cluster


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    _running.append(item)
    try:
        yield
    finally:
        _running.pop()


def _guarded(orig: Callable[..., Any], count: bool) -> Callable[..., Any]:
    def run(self: Cluster, *args: Any, **kwargs: Any) -> Any:
        item = _running[-1] if _running else None
        if item is None or item.get_closest_marker("integration") is None:
            where = item.nodeid if item is not None else "outside any test"
            pytest.fail(f"{where} starts a PostgreSQL cluster but is not marked "
                        "@pytest.mark.integration (`-m \"not integration\"` must start none)",
                        pytrace=False)
        if count:
            _started.append(item.nodeid)
        return orig(self, *args, **kwargs)

    run.__wrapped__ = orig  # type: ignore[attr-defined]
    return run


def pytest_configure(config: pytest.Config) -> None:
    for name in ("init", "start"):
        orig = getattr(cluster_mod.Cluster, name)
        if not hasattr(orig, "__wrapped__"):
            setattr(cluster_mod.Cluster, name, _guarded(orig, count=name == "start"))


_from_workers: list[int] = []  # clusters the suite's workers started (`-n`, pytest-xdist)


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = getattr(session.config, "workeroutput", None)  # set in a worker only
    if out is not None:
        out["pgparmon_clusters_started"] = len(_started)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    out = getattr(node, "workeroutput", None) or {}
    _from_workers.append(int(out.get("pgparmon_clusters_started", 0)))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    workers = f" (by {len(_from_workers)} workers)" if _from_workers else ""
    terminalreporter.write_line(f"pgparmon: throwaway PostgreSQL clusters started: "
                                f"{len(_started) + sum(_from_workers)}{workers}")


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


def _debian_tool(binary: str, package: str) -> str:
    """A tool from a Debian package, installed once per machine when missing;
    the test is skipped, saying why, when it cannot be installed."""
    from support import ensure_debian_package, install_failure

    path = ensure_debian_package(binary, package)
    if path is None:
        pytest.skip(f"{binary} unavailable: {install_failure(binary)}")
    return path


@pytest.fixture(scope="session")
def pgbouncer() -> str:
    return _debian_tool("pgbouncer", "pgbouncer")


@pytest.fixture(scope="session")
def pgcopydb() -> str:
    return _debian_tool("pgcopydb", "pgcopydb")


@pytest.fixture(scope="session")
def pgbackrest() -> str:
    return _debian_tool("pgbackrest", "pgbackrest")


@pytest.fixture(scope="session")
def sudo() -> str:
    return _debian_tool("sudo", "sudo")


# ---- TLS and basic auth (the exporter's --web-config) ---------------------------------

PASSWORD = "correct horse battery staple"  # the basic-auth password of the TLS tests


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Certificates made by the openssl command (support.Pki)."""
    from support import Pki

    return Pki(_debian_tool("openssl", "openssl"), str(tmp_path_factory.mktemp("pki")))


@pytest.fixture(scope="session")
def pw_hash() -> str:
    """PASSWORD's bcrypt hash, as htpasswd -nBC 10 writes it."""
    import bcrypt

    return bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()
