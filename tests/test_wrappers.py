"""pgparmon.wrappers: the command a wrapper (su, sudo, runuser, env, nice,
timeout, a shell's -c) runs."""

from __future__ import annotations

import pytest

from pgparmon.wrappers import unwrap, wrapped

DUMP = ["pg_dump", "-Fd", "-j", "2", "-f", "/b/x", "db"]


@pytest.mark.parametrize("argv", [
    ["su", "postgres", "-c", "pg_dump -Fd -j 2 -f /b/x db"],
    ["su", "-", "postgres", "-c", "exec pg_dump -Fd -j 2 -f /b/x db"],
    ["su", "-c", "pg_dump -Fd -j 2 -f /b/x db", "postgres"],
    ["su", "-s", "/bin/sh", "postgres", "--command=pg_dump -Fd -j 2 -f /b/x db"],
    ["/usr/bin/sudo", "-u", "postgres", *DUMP],
    ["sudo", "-iu", "postgres", *DUMP],
    ["sudo", "-E", "--user=postgres", "--", *DUMP],
    ["sudo", "-upostgres", *DUMP],
    ["runuser", "-u", "postgres", "--", *DUMP],
    ["runuser", "-u", "postgres", "--", "nice", "-n", "5", *DUMP],
    ["runuser", "postgres", "-c", "pg_dump -Fd -j 2 -f /b/x db"],
    ["env", "PGPASSWORD=x", "-u", "PGSERVICE", *DUMP],
    ["nice", "-n", "10", "ionice", "-c", "3", *DUMP],
    ["nice", "-5", *DUMP],
    ["timeout", "-s", "KILL", "3600", *DUMP],
    ["timeout", "--preserve-status", "1h", *DUMP],
    ["nohup", "setsid", *DUMP],
    ["taskset", "-c", "0-3", *DUMP],
    ["sh", "-c", "PGAPPNAME=x pg_dump -Fd -j 2 -f /b/x db"],
    ["bash", "-e", "-c", "exec pg_dump -Fd -j 2 -f /b/x db"],
    ["sudo", "-u", "postgres", "sh", "-c", "nice pg_dump -Fd -j 2 -f /b/x db"],
])
def test_the_command_inside(argv: list[str]) -> None:
    assert unwrap(argv) == DUMP and wrapped(argv)


@pytest.mark.parametrize("argv", [
    DUMP,
    ["pgbackrest", "--stanza=main", "backup"],
    ["sh", "load.sh"],  # a script: its own process tree, not a wrapper
    ["sh", "-c", "for f in *.csv; do psql -c x; done"],
    ["su", "postgres"],  # an interactive shell
    ["env", "-S", "pg_dump db"],
    ["sudo"],
    [],
])
def test_what_is_not_unwrapped(argv: list[str]) -> None:
    assert unwrap(argv) == argv and not wrapped(argv)


@pytest.mark.parametrize("text", ["pg_dump db | gzip > x.gz",
                                  "cd /x && pg_restore -j 2 -d db x"])
def test_a_su_string_of_several_commands_is_the_shell_it_runs(text: str) -> None:
    """su runs its string through a shell: a string that is no one simple
    command is that shell's (`sh -c STRING`), read as a shell's -c string
    is (its tool, once, in steps or in turn: steps.tool_groups)."""
    from pgparmon.steps import tool_groups

    argv = ["su", "postgres", "-c", text]
    assert unwrap(argv) == ["sh", "-c", text] and wrapped(argv)
    groups = tool_groups(unwrap(argv))
    assert groups is not None and len(groups) == 1 and len(groups[0][1]) == 1


def test_the_inner_commands_own_c_is_its_own() -> None:
    psql = ["psql", "-h", "/s", "-c", "\\copy t FROM 'f' CSV"]
    assert unwrap(["runuser", "-u", "postgres", "--", "nice", *psql]) == psql
    assert unwrap(["sudo", "-u", "postgres", *psql]) == psql
    assert unwrap(["su", "postgres", "-c", "psql -h /s -c x"]) == ["psql", "-h", "/s", "-c", "x"]


def test_a_quoted_password_stays_a_word() -> None:
    inner = unwrap(["su", "postgres", "-c", "pg_dump 'dbname=x password=a b' -Fd -f d"])
    assert inner == ["pg_dump", "dbname=x password=a b", "-Fd", "-f", "d"]
