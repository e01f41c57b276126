"""Installing pgparmon where it runs, as README.md "Install" says: a wheel
built from the checkout (`pip wheel --no-deps`), installed into a new
virtual environment with its dependencies from the package index, then
the installed command, not the checkout, run for real. The commands'
list in `pgparmon --help` keeps each description on one line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgparmon.cluster import Cluster
from pgparmon.exitcodes import ExitCode

ROOT = Path(__file__).resolve().parent.parent
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# what pip says when the package index cannot be reached (then: skip, saying so)
UNREACHABLE = re.compile(r"NewConnectionError|Max retries exceeded|Temporary failure in name "
                         r"resolution|Network is unreachable|No matching distribution found")


def _pip(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=600, cwd=cwd)


def _unreachable(res: subprocess.CompletedProcess[str]) -> None:
    if res.returncode != 0 and UNREACHABLE.search(res.stderr + res.stdout):
        tail = (res.stderr or res.stdout).strip().splitlines()[-1]
        pytest.skip(f"the package index cannot be reached: {tail}")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The bin directory of a new virtual environment holding pgparmon,
    installed from a wheel of this checkout."""
    work = tmp_path_factory.mktemp("install")
    # built from a copy: setuptools writes build/ into the tree it builds
    src = work / "src"
    shutil.copytree(ROOT / "pgparmon", src / "pgparmon",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    res = _pip("wheel", "--no-deps", "-q", "-w", str(work / "dist"), str(src))
    _unreachable(res)  # the wheel's build requirement (setuptools) comes from the index
    assert res.returncode == 0, res.stderr[-3000:]
    wheels = list((work / "dist").glob("pgparmon-*.whl"))
    assert [w.name for w in wheels] == [f"pgparmon-{VERSION}-py3-none-any.whl"]
    # a venv with no pip of its own (ensurepip takes seconds): this pip installs into it
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    res = _pip("--python", str(venv / "bin" / "python"), "install", "-q", str(wheels[0]))
    _unreachable(res)
    assert res.returncode == 0, res.stderr[-3000:]
    yield venv / "bin"


def _run(bindir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # from elsewhere than the checkout, so that nothing of it can be imported
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COLUMNS")}
    return subprocess.run([str(bindir / "pgparmon"), *args], capture_output=True, text=True,
                          timeout=120, cwd=bindir, env={**clean, **env})


def test_a_wheel_of_the_checkout_installs_and_runs_in_a_new_venv(installed: Path) -> None:
    """Every module, SQL file and the TUI's styles are in the installed
    package; the command answers --version, --help, each command's help,
    and does real work that needs no server."""
    import pgparmon

    # the installed copy, not this checkout's
    where = subprocess.run([str(installed / "python"), "-c",
                            "import pgparmon, sys; print(pgparmon.__file__)"],
                           capture_output=True, text=True, check=True, cwd=installed)
    assert str(installed.parent) in where.stdout and str(ROOT) not in where.stdout
    site = Path(where.stdout.strip()).parent
    src = Path(pgparmon.__file__).parent
    mine = {p.relative_to(src) for p in src.rglob("*") if p.suffix in (".py", ".sql", ".tcss")}
    got = {p.relative_to(site) for p in site.rglob("*") if p.suffix in (".py", ".sql", ".tcss")}
    assert mine == got, mine ^ got

    v = _run(installed, "--version")
    assert (v.returncode, v.stdout) == (0, f"pgparmon {VERSION}\n"), v.stderr
    helped = _run(installed, "--help", COLUMNS="200")
    assert helped.returncode == 0, helped.stderr
    lines = helped.stdout.splitlines()
    for cmd in ("attach", "run", "demo", "replay", "report", "advise", "exporter"):
        i = next(k for k, ln in enumerate(lines) if ln.startswith(f"│ {cmd} "))
        # wide enough for every description on one line: none broken in two
        assert not re.match(r"│\s{6,}\S", lines[i + 1]), lines[i:i + 2]
    assert "exits with its exit code." in helped.stdout
    for cmd in ("attach", "run"):
        h = _run(installed, cmd, "--help")
        assert h.returncode == 0 and "Usage: pgparmon " + cmd in h.stdout, h.stderr

    # real work with no server: advice from timings, the report of a recording
    adv = _run(installed, "advise", "--from-timings", "1=70.3,2=43.6,4=33.7")
    assert adv.returncode == 0 and "-j" in adv.stdout, adv.stderr
    rec = ROOT / "tests" / "golden" / "monitor" / "dump_fd_j2.rec.gz"
    html = installed.parent / "report.html"
    rep = _run(installed, "report", str(rec), "--html", str(html))
    assert rep.returncode == 0, rep.stderr
    assert "pgparmon report: pg_dump" in html.read_text()


@pytest.mark.integration
def test_the_installed_command_talks_to_a_server(installed: Path, cluster: Cluster) -> None:
    """Its SQL travels in the wheel: attach connects, reads the server's
    facts and samples, and says in one line that nothing runs there."""
    res = _run(installed, "attach", "-h", str(cluster.sockdir), "-p", str(cluster.port),
               "-U", cluster.superuser, "-d", "postgres", "--json")
    assert res.returncode == ExitCode.NO_JOB, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
