"""Every exit code pgparmon returns, in one place (docs/exit-codes.md is the
user's copy of this table; a test keeps the two in step)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # the job finished (run: the job's own exit code is passed through)
    FAILED = 1  # the job failed
    USAGE = 2  # bad usage or input
    CONNECT = 3  # cannot connect to the server
    NO_JOB = 4  # no job found
    SEVERAL_JOBS = 5  # several jobs found: pick one with --pid
    ENDED_UNSEEN = 6  # the job ended, but its outcome cannot be seen by this user
    LISTEN = 7  # exporter: cannot listen on the --listen address (in use, not allowed)
    SIGHUP = 129  # the terminal went away; the recording is complete
    INTERRUPTED = 130  # Ctrl-C
    SIGTERM = 143  # stopped; the recording is complete


def for_signal(signum: int) -> int:
    """The shell's convention for a process stopped by a signal."""
    return 128 + signum


class Fatal(Exception):
    """Stop with one line on stderr and this exit code (the command line
    prints it; library code raises it instead of exiting)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = int(code)
