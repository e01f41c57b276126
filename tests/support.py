"""Helpers shared by the integration tests."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from pgparmon.cluster import Cluster
from pgparmon.monitor import Monitor
from pgparmon.record import read_recording
from pgparmon.source import EndOfRecording, ReplaySource


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


def monitor_replay(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any], Monitor]:
    """Every sample a Monitor derives from a recording (no server, no
    waiting), its summary, and the Monitor (its outcome)."""
    rec = read_recording(str(path))
    mon = Monitor(ReplaySource(rec.header, rec.events))
    mon.discover()
    samples = []
    while mon.outcome is None:
        try:
            samples.append(mon.tick())
        except EndOfRecording:
            break
    return samples, mon.summary(), mon


def read_jsonl(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]


def in_terminal(argv: list[str], env: dict[str, str], react: Callable[[bytes, int], bytes | None],
                size: tuple[int, int] = (40, 120),
                timeout: float = 120) -> tuple[bytes, int | None]:
    """Run argv on a pseudo-terminal of size (rows, cols) until it closes it.
    After each read, react(all output so far, the child's pid) may return keys
    to type (or signal the child). Returns the output and the exit code (None:
    killed at the timeout)."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:  # the child: become the program on the terminal
        os.execvpe(argv[0], argv, env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    out, deadline, closed = b"", time.monotonic() + timeout, False
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # the child closed the terminal
                    chunk = b""
                if not chunk:
                    closed = True
                    break
                out += chunk
            keys = react(out, pid)
            if keys:
                time.sleep(0.3)  # let the screen settle before typing
                os.write(fd, keys)
    finally:
        if not closed:  # the timeout, or the test failed while it ran
            os.kill(pid, 9)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    return out, os.waitstatus_to_exitcode(status) if closed else None


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
