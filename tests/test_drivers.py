"""The job model: a tool kind is one Driver subclass and a registry line.
A kind the Monitor has never heard of, registered here, is discovered from
its sessions, planned, followed and judged through its driver alone, with
no change to the Monitor or the views (no server needed)."""

from __future__ import annotations

import ast
import dataclasses
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from support import QuietSource

from pgparmon.analyze.items import Item
from pgparmon.analyze.progress import Tracker
from pgparmon.jobs.registry import driver_for
from pgparmon.analyze.stall import Stall
from pgparmon.connect import ConnTarget
from pgparmon.discover import find_jobs
from pgparmon.jobs import registry
from pgparmon.jobs.base import Driver, Job, PlanInputs, state_of
from pgparmon.monitor import Monitor
from pgparmon.readers.db import ServerFacts
from pgparmon.sample import WorkerRow
from pgparmon.snapshot import Backend, ClientProc, CopyProgress, DbSample, Snapshot
from pgparmon.views.text import plain_line

FACTS = ServerFacts(version_num=150000, version="15.0", database="shop", user="postgres",
                    backend_pid=1, backend_start=None, postmaster_start=None,
                    settings={"block_size": "8192"}, is_superuser=True, read_all_stats=True,
                    has_copy_progress=True, has_index_progress=True)


@dataclasses.dataclass
class ToyState:
    """What the toy driver keeps about one job: the bytes each table's COPY
    reported last."""

    copied: dict[str, float] = dataclasses.field(default_factory=dict)


class ToyLoad(Driver):
    """A loader that names itself 'toyload' and loads two known tables."""

    kind = "toyload"

    def new_state(self) -> object:
        return ToyState()

    def session_key(self, b: Backend) -> tuple[object, ...] | None:
        return (self.kind, b.datname) if b.application_name == "toyload" else None

    def from_sessions(self, members: list[Backend]) -> Job:
        return Job(kind=self.kind, database=members[0].datname, jobs=len(members),
                   pid_hint=frozenset(b.pid for b in members))

    def session_matches(self, job: Job, b: Backend) -> bool:
        return b.application_name == "toyload"

    def read_plan(self, src: Any, req: dict[str, Any]) -> PlanInputs | None:
        raise AssertionError("a replayed or synthetic source answers for the driver")

    def plan(self, tr: Tracker, inputs: PlanInputs) -> bool:
        for name, size in (inputs.file_sizes or {}).items():
            tr.add(Item(key=name, kind="data", relation=name, name=name, size=size, work=size))
        tr.mark_planned()
        return True

    def progress(self, tr: Tracker, it: Item, cp: CopyProgress | None, ip: Any,
                 snap: Snapshot) -> None:
        if cp is not None:
            it.done = min(float(cp.bytes_processed), 0.99 * it.work)
            self.keep(tr, it, cp)

    def keep(self, tr: Tracker, it: Item, cp: CopyProgress) -> None:
        state_of(tr, ToyState).copied[it.key] = float(cp.bytes_processed)

    def job_fields(self, tr: Tracker, workers: Sequence[WorkerRow],
                   state: str) -> dict[str, Any]:
        return {"toy_copied": sum(state_of(tr, ToyState).copied.values())}


def _backend(pid: int, table: str | None) -> Backend:
    return Backend(pid=pid, datname="shop", usename="loader", application_name="toyload",
                   client_addr=None, client_port=-1, backend_start=0.0, xact_start=0.0,
                   query_start=0.0, state="active" if table else "idle",
                   wait_event_type=None, wait_event=None, backend_type="client backend",
                   backend_xmin=None, leader_pid=None,
                   query=f"COPY {table} FROM STDIN" if table else "COMMIT")


class ScriptSource(QuietSource):
    """A Source that plays a scripted load: two sessions COPY into a and b
    (1 MB each, 100 kB per tick), then leave."""

    def __init__(self) -> None:
        self.facts = FACTS
        self.job: Job | None = None
        self.target_dir = None
        self.devices: set[str] = set()
        self.ticks = itertools.count()
        self.plans = 0

    def discover(self) -> Job:
        jobs = find_jobs(self.facts, self._db(0), scan_processes=False)
        assert len(jobs) == 1
        self.job = jobs[0]
        return self.job

    def _db(self, t: int) -> DbSample:
        if t > 12:
            return DbSample(server_ts=float(t), backends=())
        done = min(1_000_000, 100_000 * t)
        tables = ["public.a", "public.b"] if done < 1_000_000 else [None, None]
        backends = tuple(_backend(10 + i, tab) for i, tab in enumerate(tables))
        copies = tuple(CopyProgress(pid=10 + i, datname="shop", relid=None, relation=tab,
                                    command="COPY FROM", type="PIPE", bytes_processed=done,
                                    bytes_total=0, tuples_processed=done // 100,
                                    tuples_excluded=0)
                       for i, tab in enumerate(tables) if tab)
        return DbSample(server_ts=float(t), backends=backends, copies=copies, indexes=())

    def snapshot(self) -> Snapshot:
        t = next(self.ticks)
        return Snapshot(ts=float(t), wall=1000.0 + t, db=self._db(t), host=None)

    def plan_inputs(self, req: dict[str, Any] | None = None) -> PlanInputs | None:
        self.plans += 1
        return PlanInputs(file_sizes={"public.a": 1e6, "public.b": 1e6})

    def catalog_done(self) -> dict[str, Any]:
        return {}


@pytest.fixture()
def toyload() -> Iterator[None]:
    registry.register(ToyLoad(), first=True)
    yield
    registry.unregister("toyload")


def test_a_new_kind_is_followed_through_its_driver_alone(toyload: None) -> None:
    src = ScriptSource()
    mon = Monitor(src)
    job = mon.discover()
    assert job.kind == "toyload" and job.jobs == 2
    samples = []
    while mon.outcome is None and len(samples) < 30:
        samples.append(mon.tick())
    assert src.plans == 1  # planned once, from the source's recorded-style inputs
    mid = samples[5]
    assert mid.job.kind == "toyload" and mid.job.items_total == 2
    assert mid.job.progress is not None
    assert 0.4 < mid.job.progress < 0.6  # 500 kB of 2 x 1 MB through progress()
    assert {w.relation for w in mid.workers} == {"public.a", "public.b"}
    assert mid.job.eta_s is not None
    assert mid.job.kind_fields["toy_copied"] == 1_000_000  # from the driver's own state
    assert "toyload" in plain_line(mid)
    assert samples[-1].job.state == "finished" and mon.outcome is not None
    assert mon.summary()["kind"] == "toyload"


class Untouchable:
    """A driver's state that fails whoever reads anything of it."""

    def __getattribute__(self, name: str) -> Any:
        raise AssertionError(f"the driver's state was read ({name})")


class BlindLoad(ToyLoad):
    """The toy loader with a state that nobody but it may read (and it
    never does)."""

    def new_state(self) -> object:
        return Untouchable()

    def keep(self, tr: Tracker, it: Item, cp: CopyProgress) -> None:
        pass

    def job_fields(self, tr: Tracker, workers: Sequence[WorkerRow],
                   state: str) -> dict[str, Any]:
        return {}


def test_the_tracker_holds_the_drivers_state_without_reading_it() -> None:
    registry.register(BlindLoad(), first=True)
    try:
        mon = Monitor(ScriptSource())
        mon.discover()
        samples = []
        while mon.outcome is None and len(samples) < 30:
            samples.append(mon.tick())
        summary = mon.summary()
    finally:
        registry.unregister("toyload")
    assert samples[-1].job.state == "finished" and summary["kind"] == "toyload"
    assert mon.tracker is not None and type(mon.tracker.driver_state) is Untouchable


# what a Tracker attribute's value may be changed with; a driver calls the
# Tracker's own methods instead (its state, driver_state's, is its own)
_MUTATORS = {"append", "extend", "insert", "pop", "popitem", "remove", "discard", "add",
             "clear", "update", "setdefault", "sort", "reverse", "__setitem__"}


def _tracker_writes(tree: ast.AST) -> list[tuple[int, str]]:
    """Where code writes a Tracker (a name `tr` or `tracker`) directly: an
    attribute assigned or deleted, an item of one assigned or deleted, or a
    mutating method called on one."""

    def of_tracker(node: ast.AST) -> str | None:
        if isinstance(node, ast.Subscript):
            node = node.value
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in ("tr", "tracker"):
            return node.attr
        return None

    out = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for t in targets:
            for e in t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]:
                if (attr := of_tracker(e)) is not None:
                    out.append((node.lineno, f"tr.{attr} written"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _MUTATORS:
            attr = of_tracker(node.func.value)
            if attr is not None and attr != "driver_state":
                out.append((node.lineno, f"tr.{attr}.{node.func.attr}()"))
    return sorted(out)


def test_drivers_change_the_tracker_only_through_its_methods() -> None:
    """No driver module writes a Tracker's fields (it calls add, set_state,
    finish, mark_planned, restart_rates, add_worker...), and none keeps its
    own figures in a string-keyed bag on it (its state object instead)."""
    import pathlib

    import pgparmon

    root = pathlib.Path(pgparmon.__file__).parent
    found = []
    for path in sorted((root / "jobs").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [f"{path.name}:{line}: {what}" for line, what in _tracker_writes(tree)]
    assert found == []
    for path in sorted(root.rglob("*.py")):
        assert "kind_state" not in path.read_text(encoding="utf-8"), path
    # the check finds what it looks for
    bad = ast.parse("tr.planned = True\ntr.workers.pop(1)\ntr.history[0] = 1\n"
                    "tr.x, y = 1, 2\ntr.driver_state.rows.clear()\nst.x = 1\n")
    assert [line for line, _ in _tracker_writes(bad)] == [1, 2, 3, 4]


def test_sessions_go_to_the_first_driver_that_claims_them(toyload: None) -> None:
    db = ScriptSource()._db(1)
    assert [j.kind for j in find_jobs(FACTS, db, scan_processes=False)] == ["toyload"]
    registry.unregister("toyload")
    # without it, the same sessions are a COPY load of the catch-all driver
    kinds = [j.kind for j in find_jobs(FACTS, db, scan_processes=False)]
    registry.register(ToyLoad(), first=True)
    # one client (same application_name, address, user) loading two tables is
    # one job, grouped by the client, not one job per target table
    assert kinds == ["copy"]



@pytest.mark.parametrize("client", [False, True], ids=["sessions", "client process"])
def test_a_job_counts_from_its_own_start_not_the_first_sample(toyload: None,
                                                              client: bool) -> None:
    """Attached late: the job's sessions opened 30 and 25 s before the first
    sample, on a server whose clock runs 100 s behind ours; with its client
    process on this host (started 40 s before), that counts instead."""
    src = ScriptSource()
    job = src.discover()
    if client:
        job = replace(job, client_pid=77)
    tr = Tracker(job, driver_for(job.kind))
    proc = ClientProc(pid=77, ppid=1, name="toyload", create_time=960.0, status="running",
                      cpu_user=0.0, cpu_system=0.0, read_chars=0, write_chars=0, open_files=())
    for t in range(3):
        db = src._db(t)
        db = replace(db, server_ts=900.0 + t,  # ours is 1000 + t
                     backends=tuple(replace(b, backend_start=870.0 + 5 * i)
                                    for i, b in enumerate(db.backends)))
        tr.update(Snapshot(ts=float(t), wall=1000.0 + t, db=db, host=None,
                           clients=(proc,) if client else ()))
    assert tr.first_wall == 1000.0
    if client:
        assert (tr.started, tr.started_from) == (960.0, "client process")
    else:
        assert (tr.started, tr.started_from) == (970.0, "sessions")
    # never after the first sample, whatever the clocks say
    late = Tracker(job, driver_for(job.kind))
    db = replace(src._db(0), server_ts=900.0, backends=tuple(
        replace(b, backend_start=905.0) for b in src._db(0).backends))
    late.update(Snapshot(ts=0.0, wall=1000.0, db=db, host=None))
    assert late.started == 1000.0 and late.started_from == "sessions"


def test_published_times_count_from_the_jobs_start(toyload: None) -> None:
    """elapsed_s, job.started and the summary's wall_s and started."""
    src = ScriptSource()
    real = src._db
    src._db = lambda t: replace(  # type: ignore[method-assign]
        real(t), server_ts=1000.0 + t,  # the server's clock is ours
        backends=tuple(replace(b, backend_start=990.0 + t) for b in real(t).backends))
    mon = Monitor(src)
    mon.discover()
    docs = [mon.tick().to_json() for _ in range(3)]
    assert [d["elapsed_s"] for d in docs] == [10.0, 11.0, 12.0]
    assert docs[0]["job"]["started"] == "1970-01-01T00:16:30.000+00:00"
    assert docs[0]["job"]["started_from"] == "sessions"
    s = mon.summary()
    assert s["wall_s"] == 12.0 and s["started"] == docs[0]["job"]["started"]
    assert s["first_sample"] == "1970-01-01T00:16:40.000+00:00"
def test_another_users_dump_is_told_from_one_on_another_server(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two pg_dump of databases named alike, 0.3 s apart, their sockets and
    environment unreadable (another OS user's): only the server's clock
    links them. Our server's dump opened its leader session 50 ms after the
    second one started; the first one (its session on another server of
    this host) is no job of ours, though it started within seconds of it.
    Alone, the first would be ours (nothing started in between)."""
    from pgparmon.readers import procs

    def proc(pid: int, start: float) -> procs.ProcInfo:
        return procs.ProcInfo(pid, 1, "pg_dump", ("pg_dump", "-Fd", "-j", "2", "-f",
                                                  f"/tmp/d{pid}", "sample"), start, "root")

    def dump_session(pid: int, start: float) -> Backend:
        return Backend(pid=pid, datname="sample", usename="postgres",
                       application_name="pg_dump", client_addr=None, client_port=-1,
                       backend_start=start, xact_start=start, query_start=start,
                       state="active", wait_event_type=None, wait_event=None,
                       backend_type="client backend", backend_xmin=900, leader_pid=None,
                       query="COPY public.t TO stdout;")

    other, ours = proc(4101, 1000.0), proc(4105, 1000.3)
    found: list[procs.ProcInfo] = [other, ours]
    monkeypatch.setattr(procs, "scan_job_processes", lambda programs: list(found))
    monkeypatch.setattr(procs, "unix_peers", lambda: None)
    monkeypatch.setattr(procs, "backend_clients", lambda port, backends, peers: {})
    monkeypatch.setattr(procs, "tcp_ports", lambda pid, port: (set(), False))
    monkeypatch.setattr(procs, "environ_port", lambda pid: (None, False))
    monkeypatch.setattr(procs, "environ_appname", lambda pid: None)
    # the leader, then its two workers (same snapshot) once the catalog is read
    db = DbSample(server_ts=1004.0, backends=(dump_session(7001, 1000.35),
                                               dump_session(7002, 1002.0),
                                               dump_session(7003, 1002.0)))
    facts = dataclasses.replace(FACTS, database="sample")
    jobs = find_jobs(facts, db)
    assert [(j.kind, j.client_pid) for j in jobs] == [("pg_dump", ours.pid)]
    found.remove(ours)  # alone: the sessions started 0.35 s after it
    assert [j.client_pid for j in find_jobs(facts, db)] == [other.pid]
    late = DbSample(server_ts=1010.0, backends=tuple(dataclasses.replace(b, backend_start=1006.0)
                                                     for b in db.backends))
    # 6 s after it: not its sessions, a dump found from its sessions alone
    assert [(j.kind, j.client_pid) for j in find_jobs(facts, late)] == [("pg_dump", None)]


def test_a_job_that_appears_while_attach_waits_is_looked_at_twice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """attach --wait: the job found when one first appears is followed only
    once the next look, a moment later, finds the same one. A migration
    tool's first look may show a fragment (its pg_dump step before the
    transaction it belongs to, a session of a worker not linked yet): seen
    once in a pgcopydb clone's first second, attach followed that and
    returned while the tool still ran."""
    from pgparmon import open_job
    from pgparmon.discover import DiscoveryError
    from pgparmon.exitcodes import ExitCode

    tool = Job(kind="copy", database="shop", client_pid=500)
    fragment = Job(kind="pg_dump", database="shop", client_pid=501)
    other = Job(kind="copy", database="shop", pid_hint=frozenset({77}))

    class Looks:
        """A source whose each look (discover with no job yet) finds the next
        of `script`: None, a job, or several."""

        def __init__(self, *args: Any, **kw: Any) -> None:
            self.facts = FACTS
            self.job: Job | None = None
            self.sampler = SimpleNamespace(database_filter=None, backup_bands=True)

        def discover(self) -> Job:
            if self.job is None:
                found = script.pop(0)
                if found is None:
                    raise DiscoveryError("no job", ExitCode.NO_JOB)
                if isinstance(found, list):
                    raise DiscoveryError("several", ExitCode.SEVERAL_JOBS, found)
                self.job = found
                self.sampler.database_filter = found.database  # what following sets
            return self.job

        def look_again(self) -> None:
            self.job = None
            self.sampler.database_filter = None

        def close(self) -> None:
            pass

    monkeypatch.setattr(open_job, "LiveSource", Looks)
    monkeypatch.setattr(open_job, "PID_POLL_S", 0.0)
    target = ConnTarget(host="/nowhere", port="5432")
    script: list[Any] = [None, fragment, tool, [tool, other], tool, tool]
    mon = open_job.wait_for_job(target, None, wait_s=60, interval=0.0)
    assert mon.job == tool and not script  # the first twice in a row: the last two looks
    # found at attach's first look: followed at once (no wait, nothing changing)
    script = [fragment]
    assert open_job.wait_for_job(target, None, wait_s=60, interval=0.0).job == fragment
    # several, twice in a row: exit 5 as before
    script = [None, [tool, other], [other, tool]]
    with pytest.raises(DiscoveryError) as err:
        open_job.wait_for_job(target, None, wait_s=60, interval=0.0)
    assert err.value.code == ExitCode.SEVERAL_JOBS and not script


def test_a_stall_is_counted_from_the_end_of_a_wait_by_design() -> None:
    """A backup waits 15 s at its start (a wait by design: never a stall),
    then its copy's first samples show no progress yet: the stall is
    counted from the copy's first sample (5 s and 5 samples of it), not
    across the wait before it (which called the first copy sample stalled)."""
    waiting = {"now": True}
    driver = SimpleNamespace(between_steps=lambda tr: waiting["now"])
    tr = SimpleNamespace(history=[], driver=driver, workers={})
    stall = Stall()
    seen = []
    for i in range(81):  # a sample every 0.25 s; one stream, nothing done
        t = i * 0.25
        waiting["now"] = t < 15.0
        tr.history.append((t, 1, 0.0))
        seen.append((t, stall.stalled(tr, ended=False)))  # type: ignore[arg-type]
    assert [t for t, s in seen if s] == [t for t, _ in seen if t >= 20.0]
    # a job that never waited: from its first sample, as before
    never = SimpleNamespace(history=[], driver=SimpleNamespace(
        between_steps=lambda tr: False), workers={})
    stall = Stall()
    first = None
    for i in range(40):
        never.history.append((i * 0.25, 1, 0.0))
        if stall.stalled(never, ended=False) and first is None:  # type: ignore[arg-type]
            first = i * 0.25
    assert first == 5.0
