"""`pgparmon run`: start a job, follow it, and exit with its exit code.
pg_dump / pg_restore get their connections tagged, also when a shell's
`-c` string runs one of them once or in steps (a restore in sections: a
job in steps, steps.py), or several of them one after another (a dump,
then its restore: each one's job in turn); any other command (a loader, a
script) is
followed as a COPY job through its process tree, which pgparmon knows
exactly because it started it."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable

from rich.console import Console

from .cmdline import ClientArgs
from .connect import ConnectError, ConnTarget, check_reachable
from .discover import DiscoveryError
from .exitcodes import ExitCode, Fatal
from .follow import follow, open_recorder
from .record import Recorder
from .jobs.base import Job
from .jobs.registry import client_programs, client_specs, command_job, driver_for_argv, \
    parse_argv, recognise_for
from .monitor import Monitor
from .open_job import job_for_process
from .readers import procs
from .redact import redact_argv, redact_text
from .source import HostSource, LiveSource, RecordingSource
from .steps import tool_groups, tool_steps
from .wrappers import unwrap


def start_job(argv: list[str], env: dict[str, str] | None = None,
              log_dir: str | None = None, tag_sessions: bool = True,
              program: str | None = None) -> tuple[subprocess.Popen[bytes], str | None, str]:
    """Start the command, its output kept in a log file (not on the live
    screen). pg_dump / pg_restore get their connections tagged
    (PGAPPNAME, named after `program`, the tool a wrapper runs); any other
    command keeps its own application_name, and its sessions are found
    through its process tree."""
    prog = program or os.path.basename(argv[0])
    e = dict(os.environ if env is None else env)
    tag: str | None = None
    if tag_sessions:
        tag = f"{prog}/pgparmon-{uuid.uuid4().hex[:8]}"
        e["PGAPPNAME"] = tag
    fd, log = tempfile.mkstemp(prefix="pgparmon-job-", suffix=".log", dir=log_dir)
    try:
        proc = subprocess.Popen(argv, env=e, stdout=fd, stderr=fd, stdin=subprocess.DEVNULL)
    except OSError as exc:
        os.close(fd)
        os.unlink(log)
        raise Fatal(f"cannot start {prog}: {exc.strerror or exc}", ExitCode.USAGE) from None
    os.close(fd)
    return proc, tag, log


def run_job(argv: list[str], target: ConnTarget | None, interval: float, as_json: bool,
            duration: float | None, env: dict[str, str] | None = None,
            console: Console | None = None, record: str | None = None,
            plain: bool = False, copy_source: ConnTarget | None = None) -> int:
    prog = os.path.basename(argv[0]) if argv else ""
    if not prog:
        raise Fatal("nothing to run: pgparmon run -- pg_dump -Fd -j 4 -f DIR DB",
                    ExitCode.USAGE)
    # su, sudo, env, nice, a shell's -c ...: the job is the command inside
    inner = unwrap(argv)
    # a shell string that runs two tools one after another (a dump, then its
    # restore): each one's job in turn
    groups = tool_groups(inner)
    if groups is not None and len(groups) > 1:
        return _run_in_turn(argv, groups, target, interval, as_json, duration, env, console,
                            record, plain)
    # a shell string that runs a tool once or in steps (a restore in sections)
    steps = tool_steps(inner)
    if steps:
        inner = steps[0]
    tool = os.path.basename(inner[0])
    known = tool in client_programs()
    # pg_dump / pg_restore: their own options say the server; any other
    # command: the -h/-p/-U/-d given to pgparmon, else the PG* environment
    # (psql too: a load run as `psql -c "\\copy ..."` names its server)
    args = (parse_argv(inner) if known or tool in client_specs()
            else ClientArgs(program=prog))
    if target is None:  # watch the server the job talks to, found the way libpq finds it
        target = _target_of(args, env)
    if (not known or inner != list(argv)) and shutil.which(argv[0]) is None:
        raise Fatal(f"cannot start {prog}: command not found", ExitCode.USAGE)
    try:
        check_reachable(copy_source, "--source")  # before the job starts
    except ConnectError as exc:
        raise Fatal(str(exc), ExitCode.CONNECT) from None
    recorder = open_recorder(record)
    proc, tag, log = start_job(argv, env, tag_sessions=known, program=tool)
    code: int = ExitCode.INTERRUPTED
    try:
        if not known:
            job = command_job(proc.pid, argv, target.dbname)
        elif steps:
            job = _first_step_job(proc, argv, tool, tag, log)
        elif inner == list(argv):
            job = job_for_process(proc.pid, argv, tag or "")
        else:
            job = _wrapped_job(proc, argv, inner, tag, log)
        mon = _monitor(job, target, proc, log, recorder, copy_source)
        try:
            code = follow(mon, interval, as_json, duration, recorder, plain, console=console,
                          title=f"pgparmon run: {job.describe()}")
        finally:
            if proc.poll() is None and code == ExitCode.INTERRUPTED:
                proc.terminate()
        if steps and code != ExitCode.INTERRUPTED:
            # the job is the shell's string: its exit status is the shell's
            # (which may still run a command after the last step)
            code = proc.wait() or code
    finally:
        _drop_log(log, code)
    return code


def _drop_log(log: str, code: int) -> None:
    """The job's output: its last lines shown when it failed, then removed."""
    if code not in (0, ExitCode.INTERRUPTED):
        _print_log_tail(log)
    try:
        os.unlink(log)
    except OSError:
        pass


def _target_of(args: ClientArgs, env: dict[str, str] | None) -> ConnTarget:
    """The server a tool's command line talks to, found the way libpq finds it."""
    e = os.environ if env is None else env
    return ConnTarget(dbname=args.dbname or e.get("PGDATABASE"),
                      host=args.host or e.get("PGHOST"),
                      port=args.port or e.get("PGPORT"), user=args.user or e.get("PGUSER"))


def _monitor(job: Job, target: ConnTarget, proc: subprocess.Popen[bytes], log: str,
             recorder: Recorder | None, copy_source: ConnTarget | None = None,
             owns: bool = True) -> Monitor:
    """The Monitor of the job `proc` runs, its first look taken; a one-line
    error when the server cannot be watched (the job runs on, unmonitored).
    owns: `proc`'s life and exit status are the job's (else the job's
    processes alone say when it ended, as for a job attached to)."""
    process = proc if owns else None
    try:
        live: LiveSource | HostSource
        if recognise_for(job.kind).host_only:  # it runs with the server down
            live = HostSource(job=job, process=process, log=log)
        else:
            live = LiveSource(target, job=job, process=process, log=log,
                              copy_source=copy_source)
        mon = Monitor(RecordingSource(live, recorder) if recorder else live)
        mon.settle_heap = True  # this process follows this one job
        mon.discover()
        return mon
    except (ConnectError, DiscoveryError) as exc:
        code = proc.wait()
        _print_log_tail(log)
        raise Fatal(f"{exc} (the job ran unmonitored and exited with {code})",
                    ExitCode.CONNECT) from None


def _run_in_turn(argv: list[str], groups: list[tuple[str, list[list[str]]]],
                 target: ConnTarget | None, interval: float, as_json: bool,
                 duration: float | None, env: dict[str, str] | None, console: Console | None,
                 record: str | None, plain: bool) -> int:
    """A shell string that runs several tools one after another (`pg_dump
    ... && pg_restore ...`): each tool's job followed in turn, as `run`
    follows one (a tool run in steps is one job in steps), each with its own
    samples, summary and recording (`--record FILE`: the first job's; the
    n-th's FILE's `.n` sibling); the exit code is the shell's. A job the
    shell never starts (a step before it failed) is not waited for."""
    if shutil.which(argv[0]) is None:
        raise Fatal(f"cannot start {os.path.basename(argv[0])}: command not found",
                    ExitCode.USAGE)
    # what run says between the jobs: stderr beside JSON on stdout
    say = console if console is not None and not as_json else Console(highlight=False,
                                                                      stderr=True)
    # no session tag: the tag names one program, and each tool's sessions
    # are found by its own driver's rule
    proc, _, log = start_job(argv, env, tag_sessions=False)
    code: int = ExitCode.INTERRUPTED
    seen: set[int] = set()
    try:
        for n, (_kind, cmds) in enumerate(groups, 1):
            tool = os.path.basename(cmds[0][0])
            found = tool_process(proc, tool, wait_s=float("inf"), root=True,
                                 accept=lambda info: info.pid not in seen and _followed(info))
            if found is None:  # the shell ended before it (a command before it failed)
                say.print(f"pgparmon run: the shell ended before job {n} of {len(groups)} "
                          f"({tool}) started")
                break
            seen.add(found.pid)
            job = job_for_process(found.pid, list(found.cmdline), "")
            if len(cmds) > 1:
                job = dataclasses.replace(job, step_shell=found.ppid)
            say.print(f"\n[bold]{n}/{len(groups)}[/] {redact_text(job.describe())}")
            recorder = open_recorder(_nth_recording(record, n))
            # the shell's status is this job's when the shell became its
            # tool (it runs its last command in its own process) or runs it
            # in steps (steps.py); else its tool's processes say its end
            mon = _monitor(job, _job_target(target, job, env), proc, log, recorder,
                           owns=found.pid == proc.pid or len(cmds) > 1)
            code = follow(mon, interval, as_json, duration, recorder, plain, console=console,
                          title=f"pgparmon run ({n}/{len(groups)}): {job.describe()}")
            if code in _STOPPED or mon.outcome is None:
                # stopped (Ctrl-C, a signal, --duration): no next job
                return _stop(proc, code)
        code = proc.wait()  # the shell's own status
    finally:
        _drop_log(log, code)
    return code


# follow() was told to stop: the shell runs on (Ctrl-C stops it too)
_STOPPED = (ExitCode.INTERRUPTED, ExitCode.SIGHUP, ExitCode.SIGTERM)


def _stop(proc: subprocess.Popen[bytes], code: int) -> int:
    if code == ExitCode.INTERRUPTED and proc.poll() is None:
        proc.terminate()
    return code


def _job_target(given: ConnTarget | None, job: Job, env: dict[str, str] | None
                ) -> ConnTarget:
    """The server one of several jobs talks to: the one given to pgparmon
    (-h -p -U), on the job's own database (a dump's source, a restore's
    target); else the job's command line's, found the way libpq finds it."""
    if given is None:
        return _target_of(job.args or parse_argv(list(job.command)), env)
    return given.with_dbname(job.database) if job.database else given


def _followed(info: procs.ProcInfo) -> bool:
    """A client process a driver follows (not `pg_restore -l`)."""
    driver = driver_for_argv(list(info.cmdline))
    return driver is not None and driver.from_tree(info, parse_argv(list(info.cmdline)))


def _nth_recording(record: str | None, n: int) -> str | None:
    """Where the n-th job of a run records: FILE for the first, FILE's `.n`
    sibling for the others (`x.pgparmon.gz` -> `x.pgparmon.2.gz`)."""
    if record is None or n == 1:
        return record
    base, gz = (record[:-3], ".gz") if record.endswith(".gz") else (record, "")
    return f"{base}.{n}{gz}"


# how long a wrapper (su, sudo, ...) may take to start the tool it runs
TOOL_START_S = 30.0


def tool_process(proc: subprocess.Popen[bytes], program: str, wait_s: float = TOOL_START_S,
                 accept: Callable[[procs.ProcInfo], bool] | None = None, root: bool = False
                 ) -> procs.ProcInfo | None:
    """The process below `proc` that runs `program` (the tool a wrapper
    started: `su postgres -c 'pg_dump ...'`), once it runs, and `accept`
    takes it; None when the wrapper exits first or after wait_s.  Debian's
    client programs start as `perl /usr/bin/pg_dump` and exec the real one:
    the script's name counts.  root: `proc` itself too (a shell runs the
    last command of its string in its own process)."""
    deadline = time.monotonic() + wait_s
    while True:
        for pid in procs.tree_pids(proc.pid)[0 if root else 1:]:
            info = procs.proc_info(pid)
            if info is not None and program in (
                    info.name, *(os.path.basename(a) for a in info.cmdline[:2])) \
                    and (accept is None or accept(info)):
                return info
        if proc.poll() is not None or time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def _started_tool(proc: subprocess.Popen[bytes], argv: list[str], tool: str, log: str,
                  accept: Callable[[procs.ProcInfo], bool] | None = None) -> procs.ProcInfo:
    """The tool's process `proc` started (tool_process), or, when it exited
    first or never started it, a one-line error with its exit code."""
    found = tool_process(proc, tool, accept=accept)
    if found is None:
        code = proc.wait()
        _print_log_tail(log)
        raise Fatal(f"{os.path.basename(argv[0])} did not start {tool} (it exited with {code})",
                    code if code else ExitCode.USAGE)
    return found


def _wrapped_job(proc: subprocess.Popen[bytes], argv: list[str], inner: list[str],
                 tag: str | None, log: str) -> Job:
    """The job of a tool run through a wrapper: the tool's own process is the
    job's client (its workers are its children), its kind and options come
    from its command line.  Our tag on its sessions (PGAPPNAME) goes through
    su, env, nice and the like, not through sudo (env_reset): where the
    tool's environment does not hold it, its sessions are grouped by its
    driver's rule for a job we did not start."""
    tool = os.path.basename(inner[0])
    found = _started_tool(proc, argv, tool, log)
    seen = procs.environ_appname(found.pid)
    job = job_for_process(found.pid, inner, tag if tag and seen == tag else "")
    return dataclasses.replace(job, command=tuple(redact_argv(argv)))


def _first_step_job(proc: subprocess.Popen[bytes], argv: list[str], tool: str,
                    tag: str | None, log: str) -> Job:
    """The job of a shell string that runs a tool in steps: its first step's
    process once it runs (a step a driver follows: not `pg_restore -l`),
    found as a job in steps (steps.py) whose shell is that process's parent."""

    def is_step(info: procs.ProcInfo) -> bool:
        return info.name == tool and _followed(info)

    found = _started_tool(proc, argv, tool, log, is_step)
    seen = procs.environ_appname(found.pid)
    job = job_for_process(found.pid, list(found.cmdline), tag if tag and seen == tag else "")
    return dataclasses.replace(job, step_shell=found.ppid)


def _print_log_tail(log: str) -> None:
    tail = _log_tail(log)
    if tail:
        sys.stderr.write(redact_text(tail) + "\n")


def _log_tail(path: str, lines: int = 5) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return ""
