"""Helpers shared by the integration tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import psutil
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


class Lines:
    """The JSON Lines of a running `pgparmon ... --json` (a Popen with
    stdout and stderr piped, text mode), read as they come by two threads:
    a test waits for the sample it needs (a worker seen, a stall, progress)
    instead of sleeping and hoping the sample came."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.docs: list[dict[str, Any]] = []
        self.err: list[str] = []
        self.cursor = 0  # wait_for looks at the docs from here on
        self.cond = threading.Condition()
        self.threads = [threading.Thread(target=self._read, args=(proc.stdout, True), daemon=True),
                        threading.Thread(target=self._read, args=(proc.stderr, False),
                                         daemon=True)]
        for t in self.threads:
            t.start()

    def _read(self, stream: Any, out: bool) -> None:
        for line in stream:
            with self.cond:
                if not out:
                    self.err.append(line)
                elif line.lstrip().startswith("{"):
                    self.docs.append(json.loads(line))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    @property
    def stderr(self) -> str:
        with self.cond:
            return "".join(self.err)

    def wait_for(self, pred: Callable[[dict[str, Any]], bool], what: str,
                 timeout: float = 90.0) -> dict[str, Any]:
        """The first sample from the cursor on that pred accepts (the cursor
        moves past it). Fails saying `what` when the process ends or the
        timeout passes without one."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                while self.cursor < len(self.docs):
                    doc = self.docs[self.cursor]
                    self.cursor += 1
                    if doc.get("schema") == "pgparmon.sample/1" and pred(doc):
                        return doc
                ended = not any(t.is_alive() for t in self.threads[:1])
                left = deadline - time.monotonic()
                if ended or left <= 0:
                    last = self.docs[-1]["job"] if self.docs and "job" in self.docs[-1] else None
                    raise AssertionError(f"never saw {what} ({'it exited' if ended else 'timed out'}"
                                         f"; last job: {last}; stderr: {''.join(self.err)[-800:]})")
                self.cond.wait(min(left, 0.5))

    def finish(self, timeout: float = 90.0) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
        """Wait for the process to end: its samples, its summary (the one
        there must be) and its stderr."""
        self.proc.wait(timeout=timeout)
        for t in self.threads:
            t.join(timeout=30)
        samples = [d for d in self.docs if d.get("schema") == "pgparmon.sample/1"]
        summary = [d for d in self.docs if d.get("schema") == "pgparmon.summary/1"]
        assert samples and len(summary) == 1, (self.proc.returncode, self.stderr[-2000:])
        return samples, summary[0], self.stderr


def tick_until(mon: Any, done: Callable[[dict[str, Any]], bool], ticks: int = 400,
               pause: float = 0.25) -> list[dict[str, Any]]:
    """A Monitor's samples every `pause` s until one is `done` (the samples,
    that one last): a test waits for the sample it needs, however busy the
    machine, and fails after `ticks` samples saying where the job was."""
    docs = []
    for _ in range(ticks):
        docs.append(mon.tick())
        if done(docs[-1]):
            return docs
        time.sleep(pause)
    raise AssertionError(f"not seen in {ticks} samples: {docs[-1]['job']}")


def stop(pids: Iterable[int], timeout: float = 30.0) -> list[int]:
    """SIGSTOP these processes and return once each is seen stopped (a
    signal takes effect when the process next runs: on a busy machine, not
    at once). Returns the pids stopped (those that still existed)."""
    stopped = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    for pid in stopped:
        while True:
            try:
                if psutil.Process(pid).status() in (psutil.STATUS_STOPPED,
                                                    psutil.STATUS_TRACING_STOP,
                                                    psutil.STATUS_ZOMBIE):
                    break
            except psutil.NoSuchProcess:
                break
            assert time.monotonic() < deadline, f"process {pid} never stopped"
            time.sleep(0.01)
    return stopped


@contextlib.contextmanager
def held(pid: int) -> Iterator[list[int]]:
    """The process tree of pid stopped (SIGSTOP, seen stopped) while the
    block runs, then resumed: a monitor started in the block finds the job
    still running (on a busy machine attach's start-up can outlast a short
    job); it sees it stalled until then."""
    pids = stop(tree(pid))
    try:
        yield pids
    finally:
        resume(pids)


def attach_while_held(pid: int, argv: list[str], env: dict[str, str] | None = None) -> Lines:
    """`pgparmon attach --json ...` (argv) started while the job of pid is
    held, the job resumed once attach has sampled it: attach is sure to
    find it mid-run. Returns attach's lines (finish() waits for its end)."""
    with held(pid):
        att = Lines(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env))
        att.wait_for(lambda s: True, "attach's first sample")
    return att


def resume(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def tree(pid: int) -> list[int]:
    """A process and its descendants, the process first."""
    try:
        p = psutil.Process(pid)
        return [pid, *(c.pid for c in p.children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def wait_for_monitor(cluster: Cluster, proc: subprocess.Popen[Any], dbname: str,
                     timeout: float = 60.0) -> None:
    """Return once a `pgparmon attach` just started has connected to dbname
    and run its sample statement once (its session idle after it): it is
    looking for the job, and found none yet. Tests that need attach to be
    waiting before the job starts wait for this, not a fixed pause."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(cluster.conninfo(dbname), autocommit=True) as conn:
        while True:
            (n,) = conn.execute(  # type: ignore[misc]
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND "
                "application_name = 'pgparmon' AND state = 'idle' "
                "AND query LIKE '%%One sample, one round trip%%'", (dbname,)).fetchone()
            if n:
                return
            assert proc.poll() is None, f"attach exited with {proc.returncode}"
            assert time.monotonic() < deadline, "attach never sampled the server"
            time.sleep(0.05)


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
