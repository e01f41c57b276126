"""`pgparmon run` through su, sudo, runuser and other wrappers: the job is
the tool inside, with the same kind, progress and end as without them
(docs/faults.md).  As root the tools run as the cluster's own user, as a
DBA's would."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import pgparmon_cmd, read_jsonl

from pgparmon.cluster import Cluster

integration = pytest.mark.integration

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="su / sudo / runuser to the cluster's user need root")


def _run(cluster: Cluster, wrapped: list[str], timeout: float = 180
         ) -> tuple[list[dict[str, Any]], dict[str, Any], subprocess.CompletedProcess[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    res = subprocess.run(pgparmon_cmd("run", "--json", "--interval", "0.3", "--", *wrapped),
                         capture_output=True, text=True, env=env, timeout=timeout)
    docs = read_jsonl(res.stdout)
    samples = [d for d in docs if d.get("schema") == "pgparmon.sample/1"]
    summary = next((d for d in docs if d.get("schema") == "pgparmon.summary/1"), {})
    return samples, summary, res


def _conn(cluster: Cluster, db: str) -> list[str]:
    return ["-h", str(cluster.sockdir), "-p", str(cluster.port), "-U", "postgres", "-d", db]


def _server_user_dir(workdir: Path, name: str) -> Path:
    d = workdir / name
    d.mkdir()
    shutil.chown(d, "postgres")
    return d


def _wrappers(sudo: str | None, argv: list[str]) -> dict[str, list[str]]:
    out = {"su": ["su", "postgres", "-c", shlex.join(argv)],
           "runuser+nice": ["runuser", "-u", "postgres", "--", "nice", "-n", "5", *argv]}
    if sudo:
        out["sudo"] = [sudo, "-u", "postgres", *argv]  # env_reset: our tag does not pass
    return out


def _check_dump_like(samples: list[dict[str, Any]], summary: dict[str, Any], kind: str,
                     res: subprocess.CompletedProcess[str], how: str) -> None:
    assert res.returncode == 0, (how, res.stderr)
    assert samples, (how, res.stderr)
    assert {s["job"]["kind"] for s in samples} == {kind}, how
    assert samples[0]["job"]["command"][0] in ("su", "runuser") or "sudo" in \
        samples[0]["job"]["command"][0], how
    workers = {w["pid"] for s in samples for w in s["workers"] if w["phase"] == "copy"}
    assert len(workers) == 2, (how, workers)  # -j 2: both workers' sessions, however tagged
    prog = [s["job"]["progress"] for s in samples if s["job"]["progress"] is not None]
    assert prog and all(b >= a for a, b in zip(prog, prog[1:], strict=False)), (how, prog)
    assert samples[-1]["job"]["state"] == "finished" and samples[-1]["job"]["progress"] == 1.0
    assert summary["state"] == "finished" and summary["exit_code"] == 0, how


@integration
@needs_root
def test_pg_dump_and_pg_restore_through_su_sudo_and_runuser(
        cluster: Cluster, sample_db: str, dump_archive: Path, workdir: Path,
        sudo: str) -> None:
    os.chmod(workdir, 0o755)
    for how, wrapped in _wrappers(sudo, [cluster.client("pg_dump"), "-Fd", "-j", "2",
                                         "-f", "OUT", *_conn(cluster, sample_db)]).items():
        out = _server_user_dir(workdir, f"dump-{how}") / "d"
        wrapped = [a.replace("OUT", str(out)) for a in wrapped]
        samples, summary, res = _run(cluster, wrapped)
        _check_dump_like(samples, summary, "pg_dump", res, how)
        assert samples[0]["job"]["target"] == str(out), how
    archive = workdir / "archive"  # readable by the cluster's user
    shutil.copytree(dump_archive, archive)
    for path in (archive, *archive.iterdir()):
        shutil.chown(path, "postgres")
    for how in _wrappers(sudo, []):
        db = f"restored_{how.replace('+', '_')}"
        cluster.psql(f"DROP DATABASE IF EXISTS {db}")
        cluster.psql(f"CREATE DATABASE {db}")
        wrapped = _wrappers(sudo, [cluster.client("pg_restore"), "-j", "2", *_conn(cluster, db),
                                   str(archive)])[how]
        samples, summary, res = _run(cluster, wrapped)
        _check_dump_like(samples, summary, "pg_restore", res, how)


@integration
@needs_root
def test_a_loader_through_su_is_a_copy_job_with_its_file_progress(
        cluster: Cluster, sample_db: str, workdir: Path, sudo: str) -> None:
    os.chmod(workdir, 0o755)
    # every 1000th row naps: the load lasts ~8 s however fast the machine
    # (a load shorter than run's start-up would end before its first sample)
    cluster.psql("DROP TABLE IF EXISTS wrapped_load; "
                 "CREATE TABLE wrapped_load (id bigint, v text); "
                 "CREATE OR REPLACE FUNCTION wrapped_nap() RETURNS trigger LANGUAGE plpgsql AS "
                 "$$ BEGIN IF NEW.id % 1000 = 0 THEN PERFORM pg_sleep(0.05); END IF; "
                 "RETURN NEW; END $$; "
                 "CREATE TRIGGER nap BEFORE INSERT ON wrapped_load FOR EACH ROW "
                 "EXECUTE FUNCTION wrapped_nap()", dbname=sample_db)
    csv = workdir / "in.csv"
    csv.write_text("".join(f"{i},{'x' * 40}\n" for i in range(160_000)))
    os.chmod(csv, 0o644)
    psql = [cluster.client("psql"), "-X", "-q", *_conn(cluster, sample_db), "-c",
            f"\\copy wrapped_load FROM '{csv}' CSV"]
    for how, wrapped in _wrappers(sudo, psql).items():
        samples, summary, res = _run(cluster, wrapped)
        assert res.returncode == 0, (how, res.stderr)
        assert {s["job"]["kind"] for s in samples} == {"copy"}, how
        prog = [s["job"]["progress"] for s in samples if s["job"]["progress"] is not None]
        assert prog and 0 < min(prog) < 1.0, (how, prog)  # the CSV's read position
        assert any(s["job"]["progress_basis"] == "client input files" for s in samples), how
        assert all(b >= a for a, b in zip(prog, prog[1:], strict=False)), (how, prog)
        assert samples[-1]["job"]["state"] == "finished", how
        assert summary["state"] == "finished" and summary["exit_code"] == 0, how


@integration
@needs_root
def test_a_wrapper_that_starts_nothing_is_one_line(cluster: Cluster, sample_db: str) -> None:
    samples, _, res = _run(cluster, ["su", "no_such_user_xyz", "-c",
                                     f"pg_dump -Fd -j 2 -f /nonexistent {sample_db}"])
    assert res.returncode != 0 and not samples
    assert "Traceback" not in res.stderr
    assert "did not start pg_dump" in res.stderr, res.stderr
