"""What one pg_restore run restores (jobs/restore_select.py), and the live
monitor's plan and end of a restore run in sections: each step plans only
its own items and ends with them."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import psycopg
import pytest
from support import (
    Lines,
    attach_while_held,
    pgparmon_cmd,
    restore_in_steps,
    table_lock_held,
    wait_until,
)

from pgparmon.analyze.progress import Tracker
from pgparmon.cluster import Cluster
from pgparmon.cmdline import parse_client_cmdline
from pgparmon.ddl import PostDataTarget
from pgparmon.jobs.base import Job, PlanInputs
from pgparmon.jobs.pg_restore import PgRestore
from pgparmon.jobs.registry import driver_for
from pgparmon.jobs.restore_select import Selection, section_of
from pgparmon.toc import TocItem


def _toc() -> list[TocItem]:
    """Two schemas' tables, each with its data, key and an index; a foreign
    key from s2.b to s1.a; pg_dump's numbering (definitions, data, builds)."""
    rows = [(1, "TABLE", "s1", "a"), (2, "TABLE", "s2", "b"), (3, "SEQUENCE", "s1", "a_id_seq"),
            (10, "TABLE DATA", "s1", "a"), (11, "TABLE DATA", "s2", "b"),
            (12, "SEQUENCE SET", "s1", "a_id_seq"), (13, "BLOBS", None, "BLOBS"),
            (20, "CONSTRAINT", "s1", "a a_pkey"), (21, "CONSTRAINT", "s2", "b b_pkey"),
            (22, "INDEX", "s1", "a_x_idx"), (23, "INDEX", "s2", "b_y_idx"),
            (24, "FK CONSTRAINT", "s2", "b b_a_fkey"), (25, "TRIGGER", "s1", "a trg")]
    return [TocItem(dump_id=i, catalog_oid=0, oid=i, desc=d, schema=s, tag=t, owner="o")
            for i, d, s, t in rows]


def _sel(*opts: str, listed: frozenset[int] | None = None) -> Selection:
    args = parse_client_cmdline(["pg_restore", *opts, "-d", "x", "/a"], PgRestore.client_specs)
    return Selection.of(args, listed)


def _advice_steps(data_j: int, post_j: int, fk_j: int) -> list[list[str]]:
    """The advice's four steps' pg_restore commands, as a shell's -c string
    names them (its lists through a shell variable)."""
    return [["pg_restore", "--section=pre-data", "-d", "x", "/a"],
            ["pg_restore", "-j", str(data_j), "--section=data", "-d", "x", "/a"],
            ["pg_restore", "-j", str(post_j), "--section=post-data", "-L", "$L/rest.list",
             "-d", "x", "/a"],
            ["pg_restore", "-j", str(fk_j), "-L", "$L/fk.list", "-d", "x", "/a"]]


def _ids(sel: Selection) -> tuple[list[int], list[str]]:
    ids, empty = sel.restored(_toc())
    return sorted(ids), sorted(empty)


def test_sections_split_the_items_as_pg_dump_files_them() -> None:
    assert [section_of(d) for d in ("TABLE DATA", "BLOBS", "SEQUENCE SET", "INDEX",
                                    "CONSTRAINT", "FK CONSTRAINT", "MATERIALIZED VIEW DATA",
                                    "TABLE", "SEQUENCE")] == \
        ["data", "data", "data", "post-data", "post-data", "post-data", "post-data",
         "pre-data", "pre-data"]
    assert _sel().everything and _ids(_sel()) == ([10, 11, 13, 20, 21, 22, 23, 24], [])
    assert _ids(_sel("--section=data")) == ([10, 11, 13], [])
    # post-data after an earlier data step: no table is created here, so
    # none is empty (the builds are sized by the archive's data)
    assert _ids(_sel("--section=post-data")) == ([20, 21, 22, 23, 24], [])
    # pre-data creates the tables, loads and builds nothing
    assert _ids(_sel("--section", "pre-data")) == ([], ["s1.a", "s2.b"])
    assert _ids(_sel("--section=data", "--section=post-data"))[0] == [10, 11, 13, 20, 21, 22,
                                                                      23, 24]


def test_data_only_and_schema_only() -> None:
    assert _ids(_sel("-a")) == ([10, 11, 13], [])
    assert _ids(_sel("--no-schema")) == ([10, 11, 13], [])
    # -s: the tables are created here and nothing loaded into them: their
    # builds run on empty tables
    assert _ids(_sel("-s")) == ([20, 21, 22, 23, 24], ["s1.a", "s2.b"])
    assert _ids(_sel("--no-data")) == ([20, 21, 22, 23, 24], ["s1.a", "s2.b"])
    assert _ids(_sel("--statistics-only")) == ([], [])


def test_schemas_tables_and_indexes_by_name() -> None:
    assert _ids(_sel("-n", "s1")) == ([10, 20, 22], [])
    assert _ids(_sel("--exclude-schema=s1")) == ([11, 13, 21, 23, 24], [])
    # -t names tables without a schema, and brings no index, key or foreign
    # key with them (pg_restore's -t is not pg_dump's)
    assert _ids(_sel("-t", "a")) == ([10], [])
    assert _ids(_sel("-t", "a", "-t", "b", "-I", "b_y_idx")) == ([10, 11, 23], [])
    # -I alone: that index, no table
    assert _ids(_sel("-I", "a_x_idx")) == ([22], [])
    # -P / -T select functions / triggers only: no data, no build
    assert _ids(_sel("-T", "trg")) == ([], [])
    assert _ids(_sel("-n", "s2", "-t", "a")) == ([], [])


def test_a_list_file_and_sections_together() -> None:
    assert _ids(_sel(listed=frozenset({1, 10, 22, 24}))) == ([10, 22, 24], [])
    assert _ids(_sel("--section=post-data", listed=frozenset({10, 22, 24}))) == ([22, 24], [])
    # -L with a table's definition and not its data: an empty table
    assert _ids(_sel(listed=frozenset({1, 20}))) == ([20], ["s1.a"])


def _plan(opts: list[str], toc: list[TocItem]) -> Tracker:
    """The live plan of a pg_restore with these options over a fake archive
    (every table's data file 1,000 bytes)."""
    argv = ["pg_restore", *opts, "-d", "x", "/a"]
    job = Job(kind="pg_restore", database="x", jobs=2,
              args=parse_client_cmdline(argv, PgRestore.client_specs))
    tr = Tracker(job, driver_for("pg_restore"))
    sel = Selection.of(job.args)
    extra = None
    if not sel.everything:
        ids, empty = sel.restored(toc)
        extra = {"restores": sorted(ids), "empty_tables": sorted(empty)}
    tables = {20: "s1.a", 21: "s2.b", 22: "s1.a", 23: "s2.b", 24: "s2.b"}
    targets = {str(t.dump_id): dataclasses.asdict(PostDataTarget(
        desc=t.desc, schema=t.schema, name=t.tag, table=tables[t.dump_id],
        references="s1.a" if t.desc == "FK CONSTRAINT" else None, kind=t.desc.lower(),
        dump_id=t.dump_id)) for t in toc if t.dump_id in tables}
    inputs = PlanInputs(toc=[dataclasses.asdict(t) for t in toc], extra=extra, targets=targets,
                        archive_files={str(t.dump_id): [None, 1000.0] for t in toc
                                       if t.desc == "TABLE DATA"})
    assert PgRestore().plan(tr, PlanInputs.from_dict(inputs.to_dict()))
    return tr


def test_each_step_plans_its_own_items_sized_by_the_archive() -> None:
    whole = _plan([], _toc())
    assert {i.kind for i in whole.items.values()} == {"data", "constraint", "index", "fk"}
    data = _plan(["--section=data"], _toc())
    assert {i.kind for i in data.items.values()} == {"data"}
    post = _plan(["--section=post-data"], _toc())
    assert {i.kind for i in post.items.values()} == {"constraint", "index", "fk"}
    # the builds as large as in the one-command restore, waiting on no
    # data item of this run
    for key, it in post.items.items():
        assert it.work == pytest.approx(whole.items[key].work) and it.work > 100
        assert it.deps <= set(post.items) and it.deps == whole.items[key].deps - set(data.items)
    # -s: the same builds on empty tables
    schema = _plan(["-s"], _toc())
    assert set(schema.items) == set(post.items)
    assert all(it.work <= 1.0 for it in schema.items.values())


def test_the_plan_of_a_restore_in_steps_counts_every_step(tmp_path: Path) -> None:
    """The steps a shell's command line names, together: the advice's four
    (lists through a shell variable: every item of their sections) are the
    whole archive; a data step and a post-data step whose list is a file
    that can be read: the data and the listed builds."""
    from pgparmon.jobs.pg_restore import _chain
    from pgparmon.jobs.restore_select import restored_by as _restored

    words = _advice_steps(4, 4, 4)
    sels, note, jobs = _chain({"shell": os.getpid(), "steps": words})
    assert len(sels) == 4 and jobs == [None, 4, 4, 4]
    assert note and "4 steps" in note and "2 list file(s)" in note
    assert sorted(_restored(sels, _toc())[0]) == _ids(_sel())[0]
    (tmp_path / "b.list").write_text("22; 0 0 INDEX s1 a_x_idx o\n;23; 0 0 INDEX s2 b_y_idx o\n")
    sels, note, _ = _chain({"shell": os.getpid(), "steps": [
        words[1], ["pg_restore", "--section=post-data", "-L", str(tmp_path / "b.list"), "-d",
                   "x", "/a"]]})
    assert note and "list file" not in note
    assert _restored(sels, _toc()) == ({10, 11, 13, 22}, set())
    assert _chain(None) == ([], None, [])


def test_the_later_steps_are_what_this_step_leaves_to_them() -> None:
    """The ETA's steps (pg_restore._later_steps): the items each later step
    restores, counted from the step running now (found among the shell's
    steps by what it restores: a list the chain could not read matches on
    its other options), and each later step's -j."""
    from pgparmon.jobs.pg_restore import _chain, _later_steps

    words = _advice_steps(4, 3, 2)
    chain, _, jobs = _chain({"shell": os.getpid(), "steps": words})
    # the pre-data step: the data next, the builds after it
    got = _later_steps(_sel("--section=pre-data"), chain, jobs, 1, _toc())
    assert got == {"later_steps": {"10": 1, "11": 1, "13": 1, "20": 2, "21": 2, "22": 2,
                                   "23": 2, "24": 2}, "later_jobs": [4, 3, 2]}
    # the data step, attached to in it (its job's first step)
    got = _later_steps(_sel("-j", "4", "--section=data"), chain, jobs, 1, _toc())
    assert got == {"later_steps": {str(i): 1 for i in (20, 21, 22, 23, 24)},
                   "later_jobs": [3, 2]}
    # the post-data step, its list read: the foreign key is the last step's
    rest = _sel("-j", "3", "--section=post-data", "-L", "/tmp/L/rest.list",
                listed=frozenset({20, 21, 22, 23}))
    assert _later_steps(rest, chain, jobs, 3, _toc()) == {"later_steps": {"24": 1},
                                                          "later_jobs": [2]}
    # the last step, and a run that is none of the steps: nothing after it
    fk = _sel("-j", "2", "-L", "/tmp/L/fk.list", listed=frozenset({24}))
    assert _later_steps(fk, chain, jobs, 4, _toc()) is None
    assert _later_steps(_sel("-j", "8"), chain, jobs, 1, _toc()) is None


def test_a_step_with_no_j_is_followed_at_the_steps_j() -> None:
    """The pre-data step runs on one connection (no -j); the rest of a
    restore in steps runs at the -j its later steps give, and the ETA's
    streams say so; a step with its own -j keeps it."""
    from pgparmon.jobs.pg_restore import _chain

    words = [["pg_restore", "--section=pre-data", "-d", "x", "/a"],
             ["pg_restore", "-j", "6", "--section=data", "-d", "x", "/a"],
             ["pg_restore", "-j", "4", "--section=post-data", "-d", "x", "/a"]]
    sels, _, jobs = _chain({"shell": os.getpid(), "steps": words})
    assert len(sels) == 3 and jobs == [None, 6, 4]
    for opts, want in ((["--section=pre-data"], 6), (["-j", "2", "--section=data"], 2)):
        job = Job(kind="pg_restore", database="x", args=parse_client_cmdline(
            ["pg_restore", *opts, "-d", "x", "/a"], PgRestore.client_specs))
        job = dataclasses.replace(job, jobs=job.args.jobs if job.args else None)
        tr = Tracker(job, driver_for("pg_restore"))
        assert PgRestore().plan(tr, PlanInputs(toc=[dataclasses.asdict(t) for t in _toc()],
                                               extra={"steps_jobs": 6}))
        assert PgRestore().streams(tr) == want
    # without steps named, no -j is none
    tr = Tracker(Job(kind="pg_restore", database="x"), driver_for("pg_restore"))
    assert PgRestore().plan(tr, PlanInputs(toc=[dataclasses.asdict(t) for t in _toc()]))
    assert PgRestore().streams(tr) is None


def test_run_reads_the_steps_of_a_shell_string() -> None:
    """`pgparmon run -- sh -c STRING`: the client program's commands in the
    string, each a step; the advice's four steps give four (its two
    `pg_restore -l` lists are no steps); two programs, or none, are a
    command like any other."""
    from pgparmon.advise.strategies import sectioned_restore
    from pgparmon.steps import tool_steps

    cmd = sectioned_restore("pg_restore", ["-p", "5433"], "it's db", "/srv/dump dir", 4, [7, 8])
    steps = tool_steps(["bash", "-c", cmd])
    assert steps is not None and [s[1] for s in steps] == ["--section=pre-data", "-j", "-j", "-j"]
    assert all(s[-3:] == ["-d", "it's db", "/srv/dump dir"] for s in steps)
    assert steps[2][4:6] == ["-L", "$L/rest.list"]
    # one step after a `cd`, its redirections left as words (only its
    # program and server are read from it: the job is its process's)
    (one,) = tool_steps(["sh", "-e", "-c", "cd /x; pg_restore -j 2 -d db a > log 2>&1"]) or []
    assert one[:6] == ["pg_restore", "-j", "2", "-d", "db", "a"]
    assert tool_steps(["sh", "-c", "pg_dump -Fd -f x db && pg_restore -d y x"]) is None
    assert tool_steps(["sh", "-c", "cd /x && ./load.sh"]) is None
    assert tool_steps(["sh", "-c", "pg_restore -l a > list"]) is None
    assert tool_steps(["pg_restore", "-d", "db", "a"]) is None
    assert tool_steps(["sh", "-c", "pg_restore -d 'db"]) is None  # does not split


# ------------------------------------------------- a real restore in sections


@pytest.mark.integration
def test_a_restore_in_sections_is_followed_step_by_step(cluster: Cluster,
                                                        dump_archive: Path) -> None:
    """pre-data, then `-j 2 --section=data`, then `-j 2 --section=post-data`,
    each attached to as another OS user's process is (no exit status to
    read), each held mid-run by a lock on the orders table until attach has
    sampled it: the data step plans the data alone and finishes with it (it
    used to plan the builds too, and end "failed" with every build not
    done); the post-data step plans the builds, sized by the tables' data
    that the step before loaded, and finishes with them."""
    db = "sections_r"
    cluster.psql(f"DROP DATABASE IF EXISTS {db}")
    cluster.psql(f"CREATE DATABASE {db}")
    tool = cluster.client("pg_restore")
    subprocess.run([tool, "--section=pre-data", "-d", db, str(dump_archive)],
                   env=cluster.env(), check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    kinds = []
    with psycopg.connect(cluster.conninfo(), autocommit=True) as watch:
        for section in ("data", "post-data"):
            with table_lock_held(cluster, db, "orders") as release:
                proc = subprocess.Popen([tool, "-j", "2", f"--section={section}", "-d", db,
                                         str(dump_archive)], env=cluster.env())
                wait_until(watch, "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                                  "AND application_name = 'pg_restore' AND wait_event_type = "
                                  "'Lock'", db, proc)
                att = attach_while_held(proc.pid, pgparmon_cmd(
                    "attach", "-h", str(cluster.sockdir), "-p", str(cluster.port), "-U",
                    "postgres", "-d", db, "--json", "--interval", "0.3"), env)
                release()
                samples, summary, err = att.finish(timeout=120)
            assert proc.wait() == 0
            assert att.proc.returncode == 0, err
            assert summary["state"] == "finished", summary
            assert all(i["state"] == "done" for i in summary["items"]), summary["items"]
            assert samples[-1]["job"]["progress"] == 1.0
            kinds.append({i["kind"] for i in summary["items"]})
            # started by pytest, not by a shell: no step of a restore in steps
            assert "step" not in samples[-1]["job"]
            if section == "post-data":
                orders = [i for i in summary["items"] if i["relation"] == "public.orders"]
                assert orders and all(i["work"] > 100_000 for i in orders), orders
    assert kinds[0] == {"data"}
    assert "data" not in kinds[1] and {"index", "constraint"} <= kinds[1]
    cluster.psql(f"DROP DATABASE {db}")


@pytest.mark.integration
@pytest.mark.parametrize("shell,between", [("bash", ""), ("sh", ""), ("bash", "sleep 3")])
def test_a_restore_in_steps_under_one_shell_is_one_job(cluster: Cluster, dump_archive: Path,
                                                       tmp_path: Path, shell: str,
                                                       between: str) -> None:
    """`SHELL -c 'pg_restore -j 2 --section=data ... && pg_restore -j 2
    --section=post-data ...'` (the pre-data restored before), attached to
    in the data step: one job, followed into its post-data step, that ends
    with the shell, every item of both steps done; its recording replays to
    the same end. With a command between the steps that outlasts the 2 s
    an interactive shell gets to start the next (`sleep 3`), the job waits
    for the step its shell's command line names still to come."""
    from support import monitor_replay

    db = f"steps_{shell}_{len(between)}"
    steps = restore_in_steps(cluster, dump_archive, db, between)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    rec = tmp_path / "steps.rec"
    os.chmod(tmp_path, 0o777)
    with psycopg.connect(cluster.conninfo(), autocommit=True) as watch, \
            table_lock_held(cluster, db, "orders") as release:
        chain = subprocess.Popen([shell, "-c", steps], env=cluster.env())
        wait_until(watch, "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND "
                          "application_name = 'pg_restore' AND wait_event_type = 'Lock'", db,
                   chain)
        att = attach_while_held(chain.pid, pgparmon_cmd(
            "attach", "-h", str(cluster.sockdir), "-p", str(cluster.port), "-U", "postgres",
            "-d", db, "--json", "--interval", "0.3", "--record", str(rec)), env)
        release()
        samples, summary, err = att.finish(timeout=120)
    assert chain.wait() == 0
    assert att.proc.returncode == 0, err
    first, last = samples[0]["job"], samples[-1]["job"]
    assert "--section=data" in first["command"] and "--section=post-data" in last["command"]
    assert first["client_pid"] != last["client_pid"]
    assert (first["step"], last["step"]) == (1, 2)
    # the shell's command line names both steps: the plan counts both from
    # the first sample on, and progress never falls when the second begins
    assert any(n.startswith("pg_restore in 2 steps") for n in summary["notes"])
    assert {s["job"]["items_total"] for s in samples} == {len(summary["items"])}
    prog = [s["job"]["progress"] for s in samples]
    assert all(b >= a for a, b in zip(prog, prog[1:])), prog
    assert summary["state"] == "finished", summary
    assert any(n.startswith("step 2: ") for n in summary["notes"]), summary["notes"]
    kinds = {i["kind"] for i in summary["items"]}
    assert {"data", "index", "constraint"} <= kinds
    assert all(i["state"] == "done" for i in summary["items"]), summary["items"]
    assert last["progress"] == 1.0
    # the plan kept the steps' -j (for a step with none) beside their items
    from pgparmon.record import read_recording

    plans = [v for k, v in read_recording(str(rec)).events if k == "plan" and v]
    assert plans and plans[0]["extra"]["steps_jobs"] == 2
    # the widths of the tables' rows (COPY text bytes a row, read from the
    # heads of the largest data files): builds follow rows
    widths = plans[0]["extra"]["row_text_bytes"]
    assert "public.orders" in widths and all(5 < w < 2000 for w in widths.values()), widths
    # the replay follows the same steps to the same end
    replayed, rsummary, mon = monitor_replay(rec)
    assert mon.outcome is not None and mon.outcome.state == "finished"
    assert replayed[-1]["job"]["client_pid"] == last["client_pid"]
    assert {i["key"] for i in rsummary["items"]} == {i["key"] for i in summary["items"]}
    cluster.psql(f"DROP DATABASE {db}")


@pytest.mark.integration
def test_run_of_a_restore_in_steps_follows_every_step(cluster: Cluster,
                                                      dump_archive: Path) -> None:
    """`pgparmon run -- bash -c 'pg_restore -j 2 --section=data ... &&
    pg_restore -j 2 --section=post-data ...'`: a pg_restore job (it used to
    be a COPY job of the shell's tree, which knew no archive and no build),
    followed from its data step into its post-data step, exiting with the
    shell's status. The data step waits on a lock on orders, the post-data
    step's key on customers on a lock that lets the load through, each
    released once a sample has seen its step."""
    db = "run_steps"
    steps = restore_in_steps(cluster, dump_archive, db)
    env = {**cluster.env(), "PGHOST": str(cluster.sockdir)}
    with table_lock_held(cluster, db, "orders") as data_held, \
            table_lock_held(cluster, db, "customers", "ROW EXCLUSIVE") as builds_held:
        run = Lines(subprocess.Popen(pgparmon_cmd("run", "--json", "--interval", "0.3", "--",
                                                  "bash", "-c", steps),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env))
        first = run.wait_for(lambda s: True, "the first sample")
        data_held()
        second = run.wait_for(lambda s: s["job"].get("step") == 2, "the post-data step")
        builds_held()
        samples, summary, err = run.finish(timeout=120)
    assert run.proc.returncode == 0, err
    assert first["job"]["kind"] == "pg_restore" and "--section=data" in first["job"]["command"]
    assert "--section=post-data" in second["job"]["command"]
    assert summary["state"] == "finished" and summary["exit_code"] == 0, summary
    assert any(n.startswith("step 2: ") for n in summary["notes"]), summary["notes"]
    assert {"data", "index", "constraint", "fk"} <= {i["kind"] for i in summary["items"]}
    assert all(i["state"] == "done" for i in summary["items"]), summary["items"]
    cluster.psql(f"DROP DATABASE {db}")
