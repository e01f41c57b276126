"""job_end.JobEnd, the one owner of a job's end, on hand-built snapshots:
what ends a job with client processes and one of sessions alone, a worker
that died, and the outcome kept once reached."""

from __future__ import annotations

from typing import Any

from pgparmon.analyze.items import Item
from pgparmon.analyze.progress import Tracker
from pgparmon.client_tree import ClientPids
from pgparmon.jobs.registry import driver_for
from pgparmon.job_end import NO_MEMBERS_SAMPLES, JobEnd, Outcome, outcome_exit_code
from pgparmon.jobs.base import Job
from pgparmon.snapshot import Backend, ClientProc, DbSample, Snapshot


class Catalog:
    """The end's context: a catalog that shows nothing done, asked once."""

    target_dir = "/nowhere"

    def __init__(self) -> None:
        self.asked = 0

    def catalog_done(self, database: str | None = None) -> dict[str, Any]:
        self.asked += 1
        return {}

    def final_files(self) -> Any:
        return ()

    def may_ask_again(self, kind: str) -> bool:
        return False

    def pause(self, seconds: float) -> None:
        raise AssertionError("no pause where no second answer comes")


def _proc(pid: int) -> ClientProc:
    return ClientProc(pid=pid, ppid=None, name="pg_restore", create_time=None, status="sleeping",
                      cpu_user=0.0, cpu_system=0.0, read_chars=0, write_chars=0, open_files=())


def _session(pid: int) -> Backend:
    return Backend(pid=pid, datname="shop", usename="loader", application_name="pg_restore",
                   client_addr=None, client_port=-1, backend_start=0.0, xact_start=0.0,
                   query_start=0.0, state="active", wait_event_type=None, wait_event=None,
                   backend_type="client backend", backend_xmin=None, leader_pid=None,
                   query="COPY public.t FROM stdin")


def _snap(t: int, clients: tuple[int, ...] = (), alive: bool | None = None,
          code: int | None = None, sessions: tuple[int, ...] = (),
          db_error: str | None = None) -> Snapshot:
    db = DbSample(server_ts=float(t), backends=tuple(_session(p) for p in sessions),
                  error=db_error)
    return Snapshot(ts=float(t), wall=1000.0 + t, db=db, host=None,
                    clients=tuple(_proc(p) for p in clients), root_alive=alive, exit_code=code)


def _restore(client_pid: int | None, kind: str = "pg_restore", target: str | None = None
             ) -> tuple[Tracker, JobEnd, list[str]]:
    job = Job(kind=kind, database="shop", client_pid=client_pid, jobs=2, usename="loader",
              target=target)
    tr = Tracker(job, driver_for(job.kind))
    for key in ("a", "b", "c"):
        tr.add(Item(key=key, kind="data", relation=f"public.{key}", name=key,
                    size=1e6, work=1e6))
    tr.planned = True
    notes: list[str] = []
    return tr, JobEnd(job, notes.append), notes


def test_a_worker_gone_while_others_work_is_noted_once_and_fails_the_job() -> None:
    tr, end, notes = _restore(100)
    ctx = Catalog()
    assert end.check(tr, _snap(1, (100, 101, 102), alive=True), ctx) is None
    # 101 gone while 102 works and items wait to start: it died
    assert end.check(tr, _snap(2, (100, 102), alive=True), ctx) is None
    assert end.check(tr, _snap(3, (100, 102), alive=True), ctx) is None
    assert notes == ["worker process 101 died"] and end.died == {101}
    out = end.check(tr, _snap(4, (), alive=False), ctx)
    assert out is not None and (out.state, out.reason) == ("failed", "worker process 101 died")
    assert ctx.asked == 1  # the catalog settled what it could first
    # reached once, then kept: no second verdict
    assert end.check(tr, _snap(5, (), alive=False), ctx) is out
    assert ctx.asked == 1 and tr.client_pids.seen == {100, 101, 102}


def test_workers_that_exit_together_at_the_end_did_not_die() -> None:
    tr, end, notes = _restore(100)
    assert end.check(tr, _snap(1, (100, 101, 102), alive=True), Catalog()) is None
    # the last worker goes with nothing left waiting: no note
    for it in list(tr.items.values()):
        tr.set_state(it, "done")
    assert end.check(tr, _snap(2, (100, 102), alive=True), Catalog()) is None
    out = end.check(tr, _snap(3, (), alive=False, code=0), Catalog())
    assert notes == [] and out == Outcome("finished", "exit code 0", 0)
    assert outcome_exit_code(out) == 0


def test_an_exit_code_names_the_failure() -> None:
    tr, end, _ = _restore(100)
    out = end.check(tr, _snap(1, (), alive=False, code=1), Catalog())
    assert out == Outcome("failed", "exit code 1 (pg_restore ignored errors)", 1)
    assert outcome_exit_code(out) == 1


def test_a_job_of_sessions_alone_ends_after_samples_without_one() -> None:
    tr, end, _ = _restore(None)
    ctx = Catalog()
    assert end.check(tr, _snap(1, sessions=(7,)), ctx) is None
    for t in range(2, 2 + NO_MEMBERS_SAMPLES - 1):
        assert end.check(tr, _snap(t), ctx) is None
        # a sample that cannot reach the server says nothing either way
        assert end.check(tr, _snap(t, db_error="timeout"), ctx) is None
    out = end.check(tr, _snap(9), ctx)
    assert out is not None and out.state == "failed" and "3 item(s) not done" in out.reason
    assert outcome_exit_code(out) != 0


def test_the_client_pids_keeper_keeps_its_three_facts_apart() -> None:
    """client_tree.ClientPids: the tree discovery saw stays as it was, the
    samples' processes grow `seen`, and neither is the live source's tree."""
    job = Job(kind="pg_restore", database="shop", client_pid=100, jobs=2,
              client_pids=frozenset({100, 101}))
    tr = Tracker(job, driver_for(job.kind))
    pids = tr.client_pids
    assert (pids.root, pids.at_discovery, pids.seen, pids.live_tree) == (
        100, {100, 101}, set(), set())
    pids.saw(_snap(1, (100, 102), alive=True))
    pids.saw(_snap(2, (100,), alive=True))
    assert pids.seen == {100, 102} and pids.at_discovery == {100, 101}
    snap = _snap(3, (103,), alive=False)
    assert pids.now(snap) == {100, 103} and pids.in_tree(snap) == {100, 101, 103}
    assert pids.gone(snap) == {102} and pids.all_gone(snap)
    assert not ClientPids(None).all_gone(snap)  # a job of sessions alone


class Unreadable(Catalog):
    """Another OS user's dump: its directory (mode 0700) cannot be listed."""

    target_dir = "/var/backups/theirs"

    def final_files(self) -> Any:
        return None


def test_a_worker_gone_early_is_no_failure_where_the_outcome_cannot_be_seen() -> None:
    """Another user's dump: items that ran between two samples look
    unstarted and its workers may leave in different samples at the end;
    with its directory unreadable and its exit status not ours, that is
    no evidence it failed: "ended" (outcome unseen), the suspicion noted."""
    tr, end, notes = _restore(100, "pg_dump", "/var/backups/theirs")
    ctx = Unreadable()
    assert end.check(tr, _snap(1, (100, 101, 102), alive=True), ctx) is None
    assert end.check(tr, _snap(2, (100, 102), alive=True), ctx) is None
    assert notes == ["worker process 101 died"]
    out = end.check(tr, _snap(3, (), alive=False), ctx)
    assert out is not None and out.state == "ended", out
    assert "cannot be seen" in out.reason and outcome_exit_code(out) == 6
