"""Helpers shared by the integration tests."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psycopg

from pgparmon.cluster import Cluster


def pgparmon_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pgparmon", *args]


def wait_for_backends(cluster: Cluster, dbname: str, app_prefix: str, n: int = 1,
                      timeout: float = 20.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Block until the job has at least n backends with a COPY running (or the
    given app name connected)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
        while time.monotonic() < deadline:
            (cnt,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                "AND application_name LIKE %s AND query ILIKE 'copy%%'",
                (dbname, app_prefix + "%")).fetchone()  # type: ignore[misc]
            if cnt >= n:
                return
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"job exited early with {proc.returncode}")
            time.sleep(0.05)
    raise AssertionError(f"no {app_prefix} backends appeared in {dbname}")


def read_jsonl(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]


_installed: dict[str, str | None] = {}


def ensure_debian_package(binary: str, package: str) -> str | None:
    """The path of `binary`, installing Debian `package` once per machine when
    it is missing and we are root with apt-get; None with the reason in
    `install_failure(binary)` when it cannot be had (no registry, no root)."""
    import os
    import shutil

    if binary in _installed:
        return shutil.which(binary) if _installed[binary] is None else None
    path = shutil.which(binary)
    if path:
        _installed[binary] = None
        return path
    why: str | None = None
    if os.name != "posix" or os.geteuid() != 0 or not shutil.which("apt-get"):
        why = f"{binary} is not installed and this is not root with apt-get to install {package}"
    else:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        cmd = ["apt-get", "install", "-y", "--no-install-recommends", package]
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        if res.returncode != 0:  # the package lists may be missing: fetch them once
            subprocess.run(["apt-get", "update"], capture_output=True, text=True, env=env,
                           timeout=600)
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        if res.returncode != 0 or not shutil.which(binary):
            tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["?"]
            why = f"apt-get install {package} failed: {tail[0]}"
    _installed[binary] = why
    return shutil.which(binary) if why is None else None


def install_failure(binary: str) -> str | None:
    return _installed.get(binary)
