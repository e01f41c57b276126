"""Helpers shared by the integration tests."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import psycopg

from pgparmon.cluster import Cluster, start_cluster
from pgparmon.monitor import Monitor
from pgparmon.playback import derive_all


def pgparmon_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pgparmon", *args]


@contextlib.contextmanager
def publisher_and_subscriber(pub_settings: dict[str, str] | None = None,
                             sub_settings: dict[str, str] | None = None,
                             bindir: Path | None = None
                             ) -> Iterator[tuple[Cluster, Cluster]]:
    """Two throwaway clusters for logical replication: a publisher
    (wal_level=logical, and pub_settings) and a subscriber, both of the
    server binaries in bindir (None: the machine's, cluster.find_bindir);
    both stopped at the end."""
    pub = start_cluster(bindir=bindir, settings={"wal_level": "logical", **(pub_settings or {})},
                        prefix="pgparmon-pub-")
    try:
        sub = start_cluster(bindir=bindir, settings=dict(sub_settings or {}),
                            prefix="pgparmon-sub-")
    except BaseException:
        pub.stop()
        raise
    try:
        yield pub, sub
    finally:
        sub.stop()
        pub.stop()


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


def end_jobs(cluster: Cluster, dbname: str, pids: Iterable[int], app: str = "pg_dump",
             timeout: float = 30.0) -> None:
    """End these jobs for good: each process tree resumed (a held one
    cannot die) and terminated, workers too, each process waited for, then
    until no `app` session of theirs is left in dbname (a backend notices
    its client gone only when it next writes): a job ended here is no
    second job for the next test of the same server to find."""
    procs: list[psutil.Process] = []
    for pid in pids:
        for q in tree(pid):
            try:
                procs.append(psutil.Process(q))
            except psutil.NoSuchProcess:
                pass
    for p in procs:
        for sig in (signal.SIGCONT, signal.SIGTERM):
            try:
                p.send_signal(sig)
            except psutil.NoSuchProcess:
                pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    deadline = time.monotonic() + timeout
    with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
        while True:
            (left,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                "AND application_name = %s AND pid <> pg_backend_pid()",
                (dbname, app)).fetchone()  # type: ignore[misc]
            if left == 0:
                return
            assert time.monotonic() < deadline, f"{left} {app} sessions outlived their job"
            time.sleep(0.05)


def monitor_replay(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any], Monitor]:
    """Every sample a Monitor derives from a recording (no server, no
    waiting), its summary, and the Monitor (its outcome)."""
    samples, mon = derive_all(str(path))
    return [s.to_json() for s in samples], mon.summary(), mon


class QuietSource:
    """What a scripted Source (a test's) has nothing to answer: no files at
    the end, no second look at the catalog, no pause, no worker details."""

    local = False

    def final_files(self) -> tuple[()]:
        return ()

    def may_ask_again(self, kind: str) -> bool:
        return False

    def pause(self, seconds: float) -> None:
        pass

    def details(self, pid: int, client_pid: int | None) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


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
        docs.append(mon.tick().to_json())
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
    import fcntl
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
        # one apt-get at a time on the machine (the suite's workers, `-n`,
        # may want the same package at once): the others wait, then find it
        with open("/tmp/.pgparmon-tests-apt.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            path = shutil.which(binary)
            if path:
                _installed[binary] = None
                return path
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            cmd = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y",
                   "--no-install-recommends", package]
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
            if res.returncode != 0:  # the package lists may be missing: fetch them once
                subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "update"],
                               capture_output=True, text=True, env=env, timeout=900)
                res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if res.returncode != 0 or not shutil.which(binary):
            tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["?"]
            why = f"apt-get install {package} failed: {tail[0]}"
    _installed[binary] = why
    return shutil.which(binary) if why is None else None


def install_failure(binary: str) -> str | None:
    return _installed.get(binary)


# ---- certificates for the TLS tests ---------------------------------------------------

class Pki:
    """Certificates made with the openssl command in `root`: a CA that signs
    the server's certificate (SAN 127.0.0.1 and localhost), another CA
    that signs clients' certificates, and a third CA that signed none of
    those (the wrong one). EC P-256 keys, unencrypted, valid two days."""

    def __init__(self, openssl: str, root: str) -> None:
        import os

        self.openssl = openssl
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.ca = self.make_ca("server-ca")
        self.client_ca = self.make_ca("client-ca")
        self.wrong_ca = self.make_ca("wrong-ca")
        self.server = self.leaf("server", self.ca, "IP:127.0.0.1,DNS:localhost", "serverAuth")
        self.client = self.leaf("client", self.client_ca, "DNS:prometheus", "clientAuth")
        self.stranger = self.leaf("stranger", self.wrong_ca, "DNS:prometheus", "clientAuth")

    def path(self, name: str) -> str:
        import os

        return os.path.join(self.root, name)

    def _run(self, *args: str) -> None:
        res = subprocess.run([self.openssl, *args], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr

    def make_ca(self, name: str) -> tuple[str, str]:
        crt, key = self.path(f"{name}.crt"), self.path(f"{name}.key")
        self._run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                  "-nodes", "-keyout", key, "-out", crt, "-days", "2", "-subj", f"/CN={name}")
        return crt, key

    def leaf(self, name: str, ca: tuple[str, str], san: str, eku: str) -> tuple[str, str]:
        crt, key, csr = (self.path(f"{name}.{x}") for x in ("crt", "key", "csr"))
        ext = self.path(f"{name}.ext")
        with open(ext, "w", encoding="ascii") as f:
            f.write(f"subjectAltName={san}\nextendedKeyUsage={eku}\n"
                    "basicConstraints=CA:FALSE\n")
        self._run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                  "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
        self._run("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1],
                  "-CAcreateserial", "-out", crt, "-days", "2", "-extfile", ext)
        return crt, key


@dataclass
class HeldDump:
    """A pg_dump held at its start (see dump_held_at_start)."""

    proc: subprocess.Popen[bytes]
    before: float  # wall clock just before it was started
    after: float  # ... and just after: its process began in between
    release: Callable[[], None]


@contextlib.contextmanager
def dump_held_at_start(cluster: Cluster, dbname: str, out: Path,
                       table: str = "orders") -> Iterator[HeldDump]:
    """A real `pg_dump -Fd -j 2` that waits at its start for as long as the
    test wants: a psql session holds ACCESS EXCLUSIVE on `table`, so the
    dump's leader waits on its lock; `release()` ends that session and lets
    the dump run. Nothing is timed: the caller attaches while it waits,
    then releases it. The lock is held by a sibling process, not by the
    dump's parent: a parent holding a session in a transaction makes the
    dump a step of the parent's job (discover.step_of)."""
    app = f"pgparmon-test-lock-{time.time_ns()}"
    holder = subprocess.Popen(
        [cluster.client("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dbname, "-c",
         f"BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(600)"],
        env={**cluster.env(), "PGAPPNAME": app}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    watch = psycopg.connect(cluster.conninfo(), autocommit=True)
    proc: subprocess.Popen[bytes] | None = None

    def release() -> None:
        watch.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE application_name = %s", (app,))

    def wait_for(sql: str, what: str) -> None:
        deadline = time.monotonic() + 30
        while not watch.execute(sql, (dbname,)).fetchone()[0]:  # type: ignore[index]
            assert proc is None or proc.poll() is None, \
                f"pg_dump exited early with {proc.returncode}"
            assert holder.poll() is None, "the session holding the lock exited"
            assert time.monotonic() < deadline, what
            time.sleep(0.05)

    try:
        wait_for(f"SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                 f"WHERE a.datname = %s AND a.application_name = '{app}' AND l.granted "
                 "AND l.mode = 'AccessExclusiveLock'", "the lock was never taken")
        before = time.time()
        proc = subprocess.Popen([cluster.client("pg_dump"), "-Fd", "-j", "2", "-f", str(out),
                                 dbname], env=cluster.env())
        after = time.time()
        wait_for("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND "
                 "application_name = 'pg_dump' AND wait_event_type = 'Lock'",
                 "pg_dump never waited on the lock")
        yield HeldDump(proc, before, after, release)
    finally:
        with contextlib.suppress(psycopg.Error):
            release()
        watch.close()
        holder.wait(timeout=30)
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


# ---- an archive_command the test holds and lets go ----------------------------------

class ArchiveGate:
    """An archive_command for a test cluster that holds every segment while
    the test wants (`hold()`: WAL written meanwhile queues up behind it, a
    backlog), then archives them one by one with a pause before each
    (`release()`), so that a backup waiting behind the backlog waits for a
    while whatever the machine's speed. `command(push)` is the setting: the
    gate, then `push` (the command that archives one segment, with %p and
    %f), so that a tool that checks its archive_command finds itself in it."""

    def __init__(self, base: Path, pause_s: float = 0.25) -> None:
        import os

        self.hold_file = base / "archive-hold"
        self.script = base / "archive-gate.sh"
        self.script.write_text(
            "#!/bin/sh\n"
            f"while [ -e '{self.hold_file}' ]; do sleep 0.05; done\n"
            f"sleep {pause_s}\n")
        os.chmod(self.script, 0o755)

    def command(self, push: str) -> str:
        """The archive_command setting (quoted for postgresql.conf)."""
        return f"'sh {self.script} && {push}'"

    def hold(self) -> None:
        self.hold_file.write_text("")

    def release(self) -> None:
        self.hold_file.unlink(missing_ok=True)


def archive_caught_up(cl: Cluster, timeout: float = 120.0) -> None:
    """The WAL written so far archived (no segment left `.ready`): a
    backup then waits for no backlog of archive_command."""
    cl.psql("SELECT pg_switch_wal()")
    ready = ("SELECT count(*) FROM pg_ls_dir('pg_wal/archive_status') f "
             "WHERE f LIKE '%.ready'")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cl.psql(ready).strip() == "0":
            return
        time.sleep(0.3)
    raise AssertionError("archive_command did not catch up: " + cl.psql(
        "SELECT archived_count, last_archived_wal, failed_count, last_failed_wal "
        "FROM pg_stat_archiver"))


def archive_wait(doc: dict[str, Any]) -> dict[str, Any]:
    """A backup sample's wait on the archiver (job.backup.wait.archiving), or {}."""
    return ((doc["job"].get("backup") or {}).get("wait") or {}).get("archiving") or {}


def queued_segments(cl: Cluster) -> int:
    """The segments waiting for archive_command (`.ready`)."""
    return int(cl.psql("SELECT count(*) FROM pg_ls_dir('pg_wal/archive_status') f "
                       "WHERE f LIKE '%.ready'").strip())


def jobs_found(cluster: Cluster, dbname: str) -> tuple[Any, list[Any]]:
    """One sample of `dbname` on a monitor connection and the jobs discovery
    finds from it (with the host's processes): (DbSample, [Job])."""
    from pgparmon.connect import ConnTarget
    from pgparmon.discover import find_jobs
    from pgparmon.jobs.registry import sample_extras
    from pgparmon.readers.db import DbSampler

    sampler = DbSampler(ConnTarget(host=str(cluster.sockdir), port=cluster.port,
                                   user="postgres", dbname=dbname), **sample_extras())
    facts = sampler.open()
    try:
        db = sampler.sample()
    finally:
        sampler.close()
    return db, find_jobs(facts, db)


@contextlib.contextmanager
def dumped(cluster: Cluster, dbname: str, prefix: str, fmt: str = "d") -> Iterator[Path]:
    """A -Fd (or -F `fmt`) archive of dbname (pg_dump's defaults), in a
    temporary folder removed after."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    out = d / "a.dump"
    try:
        subprocess.run([cluster.client("pg_dump"), f"-F{fmt}", "-f", str(out), dbname],
                       env=cluster.env(), check=True, capture_output=True)
        yield out
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def table_lock_held(cluster: Cluster, db: str, table: str, mode: str = "ACCESS EXCLUSIVE"
                    ) -> Iterator[Callable[[], None]]:
    """A psql session holding a lock on `table` (a sibling process, not the
    job's parent) until the returned release() ends it: ACCESS EXCLUSIVE
    holds a restore step that loads or builds on that table; ROW EXCLUSIVE
    lets the load through and holds the builds (their SHARE lock or more).
    The step is found mid-run however long the monitor takes to start;
    nothing is timed."""
    app = f"pgparmon-test-lock-{time.time_ns()}"
    holder = subprocess.Popen(
        [cluster.client("psql"), "-X", "-q", "-d", db, "-c",
         f"BEGIN; LOCK TABLE {table} IN {mode} MODE; SELECT pg_sleep(600)"],
        env={**cluster.env(), "PGAPPNAME": app}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    watch = psycopg.connect(cluster.conninfo(), autocommit=True)

    def release() -> None:
        watch.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE application_name = %s", (app,))

    try:
        wait_until(watch, "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING "
                          "(pid) WHERE a.application_name = %s AND l.granted "
                          f"AND l.mode = '{mode.title().replace(' ', '')}Lock'", app, holder)
        yield release
    finally:
        release()
        holder.wait(30)
        watch.close()


def wait_until(conn: psycopg.Connection[Any], sql: str, arg: str,
               proc: subprocess.Popen[Any]) -> None:
    """Until `sql` (one parameter, `arg`) returns a true first value; the
    process `proc` must live meanwhile (60 s at most)."""
    deadline = time.monotonic() + 60
    while not conn.execute(sql, (arg,)).fetchone()[0]:  # type: ignore[index]
        assert proc.poll() is None, f"{proc.args!r} exited early with {proc.returncode}"
        assert time.monotonic() < deadline, sql
        time.sleep(0.05)


def restore_in_steps(cluster: Cluster, archive: Path, db: str, between: str = "") -> str:
    """Database `db` made anew with the archive's pre-data restored, and
    the rest of its restore as one shell string of two steps run one after
    the other: `pg_restore -j 2 --section=data ... && pg_restore -j 2
    --section=post-data ...` (`between`: a command run between them)."""
    cluster.psql(f"DROP DATABASE IF EXISTS {db}")
    cluster.psql(f"CREATE DATABASE {db}")
    tool = cluster.client("pg_restore")
    subprocess.run([tool, "--section=pre-data", "-d", db, str(archive)],
                   env=cluster.env(), check=True, capture_output=True)
    data, post = (f"{tool} -j 2 --section={s} -d {db} {archive}" for s in ("data", "post-data"))
    return " && ".join(filter(None, (data, between, post)))
