"""A throwaway PostgreSQL cluster for the demo, the tests and the benchmarks.

initdb and postgres refuse to run as root, so when we are root the data and
socket directories are handed to the ``postgres`` system user and the server
binaries run as that user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path


class ClusterError(RuntimeError):
    pass


# How long pg_ctl waits for the server to start or stop: it returns as soon as
# it has, so this is only a bound. A cold start on a slow disk of a busy
# machine (caches dropped, the suite's I/O throttled to 10 MB/s) took more
# than a minute.
PG_CTL_WAIT_S = 300


def _version_key(path: str) -> tuple[int, ...]:
    parts = Path(path).parent.name.split(".")
    try:
        return tuple(int(p) for p in parts)
    except ValueError:
        return (0,)


def find_bindir(preferred: str | None = None) -> Path:
    """Where initdb, pg_ctl and postgres live: $PGPARMON_PGBIN, PATH,
    pg_config --bindir, or the newest /usr/lib/postgresql/*/bin."""
    candidates: list[str] = []
    for c in (preferred, os.environ.get("PGPARMON_PGBIN")):
        if c:
            candidates.append(c)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).resolve().parent))
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                                 timeout=10).stdout.strip()
            if out:
                candidates.append(out)
        except (OSError, subprocess.SubprocessError):
            pass
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    candidates.extend(found)
    for c in candidates:
        p = Path(c)
        if (p / "initdb").exists() and (p / "pg_ctl").exists() and (p / "postgres").exists():
            return p
    raise ClusterError(
        "no PostgreSQL server binaries found (initdb, pg_ctl, postgres): install the "
        "postgresql package, put its bin directory on PATH, or set PGPARMON_PGBIN"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres_user() -> tuple[int, int] | None:
    """(uid, gid) to run server binaries as, when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        pw = pwd.getpwnam("postgres")
    except KeyError as exc:
        raise ClusterError("running as root and there is no 'postgres' user to run the "
                           "server as: create one (useradd postgres)") from exc
    return pw.pw_uid, pw.pw_gid


@dataclass
class Cluster:
    """A running throwaway cluster. Use as a context manager or call stop()."""

    bindir: Path
    base: Path
    port: int
    superuser: str = "postgres"
    settings: dict[str, str] = field(default_factory=dict)
    initdb_args: tuple[str, ...] = ()  # e.g. ("-k",): data checksums
    _owner: tuple[int, int] | None = None
    started: bool = False

    @property
    def datadir(self) -> Path:
        return self.base / "data"

    @property
    def sockdir(self) -> Path:
        return self.base / "sock"

    @property
    def logfile(self) -> Path:
        return self.base / "server.log"

    def _run(self, args: list[str], timeout: float = PG_CTL_WAIT_S + 60
             ) -> subprocess.CompletedProcess[str]:
        owner = self._owner

        def demote() -> None:
            if owner:
                os.setgid(owner[1])
                os.setuid(owner[0])

        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env,
                              preexec_fn=demote if owner else None, cwd=str(self.base))
        if proc.returncode != 0:
            raise ClusterError(f"{Path(args[0]).name} failed: {proc.stderr.strip() or proc.stdout}")
        return proc

    def init(self) -> None:
        self._owner = _as_postgres_user()
        self.base.mkdir(parents=True, exist_ok=True)
        self.sockdir.mkdir(exist_ok=True)
        if self._owner:
            os.chmod(self.base, 0o755)
            for p in (self.base, self.sockdir):
                os.chown(p, *self._owner)
        self._run([str(self.bindir / "initdb"), "-D", str(self.datadir), "-U", self.superuser,
                   "-A", "trust", "-E", "UTF8", "--no-sync", "--locale=C",
                   *self.initdb_args])
        conf = {
            "port": str(self.port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.sockdir}'",
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "60",
            "shared_buffers": "128MB",
            "max_wal_size": "1GB",
            "logging_collector": "off",
            "track_io_timing": "on",
        }
        conf.update(self.settings)
        with open(self.datadir / "postgresql.conf", "a", encoding="utf-8") as f:
            f.write("\n# pgparmon throwaway cluster\n")
            f.writelines(f"{k} = {v}\n" for k, v in conf.items())

    def start(self) -> None:
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-l", str(self.logfile),
                   "-w", "-t", str(PG_CTL_WAIT_S), "start"])
        self.started = True

    def restart(self, mode: str = "fast") -> None:
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-l", str(self.logfile),
                   "-w", "-t", str(PG_CTL_WAIT_S), "-m", mode, "restart"])

    def stop(self, cleanup: bool = True) -> None:
        if self.started:
            try:
                self._run([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-w", "-t",
                           str(PG_CTL_WAIT_S),
                           "-m", "immediate", "stop"])
            except (ClusterError, subprocess.SubprocessError):
                pass
            self.started = False
        if cleanup:
            shutil.rmtree(self.base, ignore_errors=True)

    def conninfo(self, dbname: str = "postgres", tcp: bool = False) -> str:
        host = "127.0.0.1" if tcp else str(self.sockdir)
        return f"host={host} port={self.port} user={self.superuser} dbname={dbname}"

    def env(self, tcp: bool = False) -> dict[str, str]:
        """Environment for client programs (psql, pg_dump) aimed at this cluster."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(PGHOST="127.0.0.1" if tcp else str(self.sockdir), PGPORT=str(self.port),
                   PGUSER=self.superuser)
        return env

    def client(self, name: str) -> str:
        return str(self.bindir / name)

    def psql(self, sql: str, dbname: str = "postgres", timeout: float = 600) -> str:
        proc = subprocess.run([self.client("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At",
                               "-d", dbname, "-c", sql], capture_output=True, text=True,
                              env=self.env(), timeout=timeout)
        if proc.returncode != 0:
            raise ClusterError(f"psql failed: {proc.stderr.strip()}")
        return proc.stdout

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_cluster(bindir: Path | None = None, settings: dict[str, str] | None = None,
                  prefix: str = "pgparmon-", initdb_args: tuple[str, ...] = ()) -> Cluster:
    """initdb and start a cluster in a fresh temp dir on a free port."""
    bd = bindir or find_bindir()
    base = Path(tempfile.mkdtemp(prefix=prefix))
    last: Exception | None = None
    for _ in range(3):
        cl = Cluster(bindir=bd, base=base, port=free_port(), settings=dict(settings or {}),
                     initdb_args=tuple(initdb_args))
        try:
            if not cl.datadir.exists():
                cl.init()
            else:
                _set_port(cl)
            cl.start()
            return cl
        except ClusterError as exc:  # port taken between probe and bind: retry
            last = exc
            time.sleep(0.2)
    shutil.rmtree(base, ignore_errors=True)
    raise ClusterError(f"could not start a throwaway cluster: {last}")


def _set_port(cl: Cluster) -> None:
    with open(cl.datadir / "postgresql.conf", "a", encoding="utf-8") as f:
        f.write(f"port = {cl.port}\n")
