"""A job in steps: one shell runs the same tool on the same target several
times, one run after another, each doing a part of the work (a restore in
sections: `pg_restore --section=pre-data ... && pg_restore -j 4
--section=data ... && pg_restore -j 4 --section=post-data ...`, or the
advice's four steps with list files). The DBA started one restore; each
run is a step of it, never a job of its own that ends with its step.

A run whose driver says it may be a step (`Driver.in_steps`: a pg_restore
that restores part of its archive) is found with the shell that started it
(`Job.step_shell`). When its processes are gone and that shell lives, the
job's end (job_end.JobEnd) asks for the next step (`next_step`): a process
of the same program that the shell started (or that the shell became: a
shell runs the last command of a `-c` string in its own process), with the
same database and the same target (the archive, resolved in each process's
working folder). Found, the Monitor follows it as the same job (its plan
adds the step's items to those done before). Not found, the job ends once
the shell is gone or STEP_GAP_S have passed with no next step (an
interactive shell back at its prompt): a list's next command starts within
milliseconds of the last one's end. Where the shell's `-c` string names a
step still to come, the job waits for it as long as the shell lives (a
command between two steps may take its time).

The look is a reading of the live system, kept in recordings (the "step"
event), so that a replay follows the same steps. Where the shell's command
line names the steps (a `-c` string, `chain_of`), the plan counts them all
from the start; `tool_steps` reads such a string (`pgparmon run -- sh -c`
of a restore in steps is a job in steps too).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from .jobs.base import Job
from .jobs.job import StepLook
from .jobs.registry import driver_for_argv, parse_argv, recognise_for
from .readers import procs
from .redact import redact_argv
from .wrappers import shell_parts

# how long a job in steps waits, its step ended and its shell alive, for
# the shell to start the next one
STEP_GAP_S = 2.0


def resolved(path: str | None, pid: int | None) -> str | None:
    """A command line's path as process `pid` sees it (a relative one is in
    its working folder; without a pid, in ours); None when that folder is
    not ours to read."""
    if not path:
        return None
    if not os.path.isabs(path) and pid:
        try:
            import psutil

            path = os.path.join(psutil.Process(pid).cwd(), path)
        except Exception:  # noqa: BLE001 - another user's process, or gone
            return None
    return os.path.abspath(path)


def next_step(job: Job, target: str | None) -> StepLook:
    """The next step of `job` its shell started, if any (see the module).
    `target`: the job's target resolved (the archive's path)."""
    shell = job.step_shell
    info = procs.proc_info(shell) if shell else None
    if shell is None or info is None:
        return StepLook()
    program = info.name if info.name not in procs.SHELLS else None
    kids = procs.children(shell)
    for pid in [shell, *kids] if program else kids:
        step = _step_job(job, pid, target)
        if step is not None:
            return StepLook(step, True)
    # a shell still (or the tool it became, still starting): it may start one
    alive = info.name.lstrip("-") in procs.SHELLS or program in _programs(job)
    alive = alive and procs.alive(shell)
    return StepLook(None, alive, alive and _more_named(job, info))


def _more_named(job: Job, shell: procs.ProcInfo) -> bool:
    """Whether the shell's command line names a step after the one `job`
    ran (its `-c` string's steps, matched word for word; a word with a
    shell variable in it matches any)."""
    named = tool_steps(list(shell.cmdline)) or []
    ran = list(job.command)
    at = [i for i, words in enumerate(named) if _same_command(redact_argv(words), ran)]
    return bool(at) and at[-1] < len(named) - 1


def _same_command(named: list[str], ran: list[str]) -> bool:
    if len(named) != len(ran) or not named:
        return False
    if os.path.basename(named[0]) != os.path.basename(ran[0]):
        return False
    return all(n == r or "$" in n for n, r in zip(named[1:], ran[1:]))


def _programs(job: Job) -> tuple[str, ...]:
    return recognise_for(job.kind).programs


def _step_job(job: Job, pid: int, target: str | None) -> Job | None:
    """The job of process `pid` when it is the next step of `job`: the same
    program and kind, database and target; else None."""
    if pid == job.client_pid:
        return None
    p = procs.proc_info(pid)
    if p is None or p.name not in _programs(job):
        return None  # another command (or Debian's wrapper, before its exec)
    argv = list(p.cmdline)
    driver = driver_for_argv(argv)
    args = parse_argv(argv)
    if driver is None or driver.kind != job.kind or args.dbname != job.database:
        return None
    if target is not None and resolved(args.file, pid) != target:
        return None
    step = dataclasses.replace(
        job, client_pid=pid, jobs=args.jobs, format=args.format, target=args.file,
        command=tuple(redact_argv(argv)), args=args, pid_hint=frozenset(),
        client_pids=frozenset({pid}), step=job.step + 1)
    return driver.refine(step, [])


def tool_steps(argv: list[str]) -> list[list[str]] | None:
    """A shell's `-c` string that runs one client program some driver
    follows, once or as steps one after another (`pg_restore
    --section=pre-data ... && pg_restore -j 4 --section=data ...`, the
    advice's restore in steps): those commands, in order; None when it runs
    none, or commands of two such programs (`tool_groups`: jobs one after
    another)."""
    groups = tool_groups(argv)
    return groups[0][1] if groups is not None and len(groups) == 1 else None


def tool_groups(argv: list[str]) -> list[tuple[str, list[list[str]]]] | None:
    """The jobs a shell's `-c` string runs one after another: the commands
    of client programs some driver follows, in order, those of one kind in
    a row together (one job, in steps where they are several): `pg_dump
    -Fd -j 4 -f d db && pg_restore -j 4 -d new d` is a dump, then a
    restore. Each group: its driver's kind and its commands. None when the
    string runs none, or two of them side by side (`pg_dump -Fc db |
    pg_restore -d new`, `... &`): a command like any other, its process
    tree's COPY load."""
    parts = shell_parts(argv)
    if not parts:
        return None
    groups: list[tuple[str, list[list[str]]]] = []
    between: list[str] = []
    for words, ops in parts:
        between += ops
        driver = driver_for_argv(words)
        if driver is None:
            continue
        info = procs.ProcInfo(0, 0, os.path.basename(words[0]), tuple(words), 0.0, None)
        if not driver.from_tree(info, parse_argv(words)):
            continue
        if groups and _SIDE_BY_SIDE & set(between):
            return None
        between = []
        if groups and groups[-1][0] == driver.kind:
            groups[-1][1].append(words)
        else:
            groups.append((driver.kind, [words]))
    return groups or None


# a shell's operators that run the next command beside the one before
_SIDE_BY_SIDE = frozenset({"|", "&", "|&"})


def chain_of(job: Job, target: str | None) -> dict[str, Any] | None:
    """The steps a job in steps runs, when its shell's command line says
    (a `-c` string; an interactive shell's does not): the shell's pid and
    each step's command line as written (variables unexpanded) that runs
    on the job's database and archive; None when that is fewer than two."""
    info = procs.proc_info(job.step_shell) if job.step_shell else None
    cmds = tool_steps(list(info.cmdline)) if info is not None else None
    if info is None or not cmds:
        return None
    mine = []
    for words in cmds:
        driver = driver_for_argv(words)
        args = parse_argv(words)
        if driver is None or driver.kind != job.kind or args.dbname != job.database:
            continue
        if target is not None and resolved(args.file, info.pid) != target:
            continue
        mine.append(list(words))
    return {"shell": info.pid, "steps": mine} if len(mine) >= 2 else None
