"""cmdline.py: client command lines, golden cases and fuzzing."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgparmon.cmdline import ClientArgs
from pgparmon.jobs.registry import parse_argv as parse_client_cmdline

SECRET = "Sup3r$ecret"


def fields_text(res: ClientArgs) -> str:
    """Every value of the result as one string, to look for leaks."""
    def flat(v: Any) -> str:
        return " ".join(map(flat, v)) if isinstance(v, (list, tuple)) else str(v)
    return " ".join(flat(v) for v in asdict(res).values())


def test_pg_dump_short_options_attached_and_separate() -> None:
    r = parse_client_cmdline(["/usr/lib/postgresql/15/bin/pg_dump", "-Fd", "-j4", "-f", "/bk/d",
                              "-Z", "gzip:9", "-h", "db1", "-p5433", "-U", "bob", "shop"])
    assert (r.program, r.format, r.jobs, r.file, r.compression) == (
        "pg_dump", "directory", 4, "/bk/d", "gzip:9")
    assert (r.host, r.port, r.user, r.dbname) == ("db1", 5433, "bob", "shop")


def test_pg_dump_long_options_both_spellings() -> None:
    r = parse_client_cmdline(["pg_dump", "--jobs", "8", "--format=directory", "--file=/x",
                              "--dbname=shop", "--compress", "lz4", "--host=h", "--port", "6000",
                              "--username=al", "--section=data", "--section", "post-data"])
    assert (r.jobs, r.format, r.file, r.dbname, r.compression) == (8, "directory", "/x", "shop",
                                                                    "lz4")
    assert (r.host, r.port, r.user, r.sections) == ("h", 6000, "al", ("data", "post-data"))


@pytest.mark.parametrize(("argv", "fmt"), [
    (["pg_dump", "-F", "d"], "directory"), (["pg_dump", "-Fc"], "custom"),
    (["pg_dump", "--format", "TAR"], "tar"), (["pg_dump", "-Fp"], "plain"),
    (["pg_dump", "-Fx"], None), (["pg_dump"], None),
    (["pg_restore", "-Fdirectory"], "directory"), (["pg_restore", "-F", "custard"], "custom"),
])
def test_format_normalized(argv: list[str], fmt: str | None) -> None:
    assert parse_client_cmdline(argv).format == fmt


def test_bundled_flags_and_prefix_long_options() -> None:
    r = parse_client_cmdline(["pg_restore", "-vj", "6", "--form=d", "--jo=2", "-l", "a.dump"])
    assert (r.verbose, r.jobs, r.format, r.list_only, r.file) == (True, 2, "directory", True,
                                                                  "a.dump")


def test_pattern_options_do_not_eat_positionals() -> None:
    r = parse_client_cmdline(["pg_dump", "-t", "public.big", "-n", "my schema", "-T", "x*",
                              "--exclude-table-data=logs", "-e", "ext", "-E", "UTF8", "db"])
    assert r.dbname == "db"
    assert r.positional == ("db",)


def test_positional_dbname_wins_over_dash_d_for_pg_dump() -> None:
    assert parse_client_cmdline(["pg_dump", "-d", "a", "b"]).dbname == "b"


def test_pg_restore_file_is_the_archive_and_dash_f_is_output() -> None:
    r = parse_client_cmdline(["pg_restore", "-d", "target", "-f", "-", "-j", "4", "/bk/d"])
    assert (r.file, r.output, r.dbname, r.jobs, r.list_only) == ("/bk/d", "-", "target", 4, False)


def test_double_dash_ends_options() -> None:
    r = parse_client_cmdline(["pg_restore", "-j2", "--", "-weird-name"])
    assert r.file == "-weird-name" and r.jobs == 2


def test_dash_f_takes_next_argument_even_if_it_starts_with_dash() -> None:
    r = parse_client_cmdline(["pg_dump", "-f", "-", "db"])
    assert r.file == "-" and r.dbname == "db"


def test_conninfo_dbname_fields_and_no_password() -> None:
    r = parse_client_cmdline(["pg_dump", "-h", "ignored", "-d",
                              f"host=db2 port=5444 dbname=shop user=al password={SECRET}"])
    assert (r.dbname, r.host, r.port, r.user) == ("shop", "db2", 5444, "al")
    assert SECRET not in fields_text(r)
    assert "password=********" in r.redacted_argv[-1]


def test_uri_dbname_fields_and_no_password() -> None:
    r = parse_client_cmdline(["pg_restore", f"--dbname=postgresql://al:{SECRET}@h1:6543/tgt"
                              "?sslmode=require", "-j", "3", "arch"])
    assert (r.dbname, r.host, r.port, r.user, r.file) == ("tgt", "h1", 6543, "al", "arch")
    assert SECRET not in fields_text(r)


def test_multi_host_uri_keeps_hosts_drops_single_port() -> None:
    r = parse_client_cmdline(["psql", "postgresql://u@a:5432,b:5433/db"])
    assert (r.dbname, r.host, r.port) == ("db", "a,b", None)


def test_unparsable_conninfo_gives_no_dbname() -> None:
    r = parse_client_cmdline(["pg_dump", f"host='unterminated password={SECRET}"])
    assert r.dbname is None
    assert SECRET not in fields_text(r)


def test_psql_positionals_and_commands() -> None:
    r = parse_client_cmdline(["psql", "-X", "-v", "ON_ERROR_STOP=1", "-c",
                              f"ALTER ROLE x PASSWORD '{SECRET}'", "-F", ",", "shop", "loader"])
    assert (r.program, r.dbname, r.user, r.format) == ("psql", "shop", "loader", None)
    assert r.commands == ("ALTER ROLE x PASSWORD '********'",)
    assert SECRET not in fields_text(r)


def test_psql_copy_load() -> None:
    r = parse_client_cmdline(["psql", "-h", "h", "-d", "shop", "-c",
                              "\\copy big FROM 'big.csv' WITH (FORMAT csv)"])
    assert r.commands == ("\\copy big FROM 'big.csv' WITH (FORMAT csv)",)
    assert r.dbname == "shop"


def test_interpreter_wrapper_and_exe_suffix() -> None:
    assert parse_client_cmdline(["/usr/bin/perl", "/usr/bin/pg_dump", "-j3"]).jobs == 3
    assert parse_client_cmdline(["C:\\PG\\bin\\pg_restore.exe", "-l", "x"]).list_only


def test_bad_numbers_become_none() -> None:
    r = parse_client_cmdline(["pg_dump", "-jx", "-p", "99999", "db"])
    assert (r.jobs, r.port) == (None, None)
    assert parse_client_cmdline(["pg_dump", "-j", "0"]).jobs is None


def test_unknown_options_and_programs_are_kept() -> None:
    r = parse_client_cmdline(["pg_dump", "--frobnicate", "-Q", f"--api-token={SECRET}", "db"])
    assert r.unknown_options == ("--frobnicate", "-Q", "--api-token=********")
    o = parse_client_cmdline(["rsync", "-av", "a", "b"])
    assert (o.program, o.positional, o.jobs) == ("rsync", ("a", "b"), None)
    assert o.redacted_argv == ["rsync", "-av", "a", "b"]


def test_missing_values_at_the_end() -> None:
    for argv in (["pg_dump", "-j"], ["pg_dump", "--jobs"], ["pg_restore", "-f"], [],
                 ["pg_dump", "-"], ["pg_dump", "--"], ["pg_dump", "--="]):
        assert isinstance(parse_client_cmdline(argv), ClientArgs)


def test_every_known_option_is_kept_in_order_redacted() -> None:
    """What no field holds, a driver reads from `options` (vacuumdb's -t, -z...)."""
    r = parse_client_cmdline(["vacuumdb", "-zj4", "-t", "a", "--table=b(x)", "--analyze-in",
                              "-d", f"host=h dbname=d password={SECRET}", "--frob"])
    assert r.options[:4] == (("analyze", None), ("jobs", "4"), ("table", "a"), ("table", "b(x)"))
    assert r.options[4] == ("analyze-in-stages", None)
    assert r.options[5][0] == "dbname" and SECRET not in r.options[5][1]
    assert len(r.options) == 6 and r.unknown_options == ("--frob",) and r.dbname == "d"


def test_data_and_schema_only_flags() -> None:
    r = parse_client_cmdline(["pg_restore", "-a", "--schema-only", "x"])
    assert r.data_only and r.schema_only


# ------------------------------------------------------------------ fuzzing

OPTIONISH = ["-j", "-j4", "-F", "-Fd", "--jobs", "--jobs=", "--format=d", "-d", "--dbname",
             "-f", "-", "--", "-Z", "--compress=zstd:3", "-l", "-vj", "--section", "-p",
             "host=h port=x", "postgresql://", "postgresql://u:pw@h:bad/db", "'", "=", "-?",
             "--jo", "--no-", "dbname='x", "\x00", "-d\x00", "port=0"]
programs = st.sampled_from(["pg_dump", "pg_restore", "psql", "vacuumdb", "/usr/bin/perl", "x", "",
                            "/usr/lib/postgresql/15/bin/pg_dump"])
elements = st.one_of(st.text(max_size=30), st.sampled_from(OPTIONISH))


@settings(max_examples=400, deadline=None)
@given(argv=st.lists(elements, max_size=12))
def test_fuzz_never_raises_on_any_list(argv: list[str]) -> None:
    r = parse_client_cmdline(argv)
    assert isinstance(r, ClientArgs)
    assert len(r.redacted_argv) == len(argv)


@settings(max_examples=300, deadline=None)
@given(prog=programs, argv=st.lists(elements, max_size=10), at=st.integers(0, 10),
       form=st.sampled_from(["conninfo", "uri", "opt"]))
def test_fuzz_password_never_kept(prog: str, argv: list[str], at: int, form: str) -> None:
    secret = {"conninfo": ["-d", f"host=h dbname=d password={SECRET}"],
              "uri": [f"postgresql://u:{SECRET}@h/d"],
              "opt": [f"--password={SECRET}"]}[form]
    full = [prog, *argv[:at], *secret, *argv[at:]]
    r = parse_client_cmdline(full)
    assert SECRET not in fields_text(r)
