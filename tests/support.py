"""Helpers shared by the integration tests."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable

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
