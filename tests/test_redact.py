"""redact.py: golden cases plus fuzzing with hostile passwords."""

from __future__ import annotations

import shlex
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict

from pgparmon.redact import (
    MASK,
    is_secret_key,
    redact_argv,
    redact_conninfo,
    redact_env,
    redact_text,
    redact_uri,
)

# ------------------------------------------------------------------ golden

CONNINFO_CASES = [
    ("host=db port=5432 password=s3cret dbname=app",
     "host=db port=5432 password=******** dbname=app"),
    ("host=db password='a b\\'c' user=bob", "host=db password='********' user=bob"),
    ("password = spaced  host=h", "password = ********  host=h"),
    ("sslpassword=x sslmode=require", "sslpassword=******** sslmode=require"),
    ("host=h password=a\\ b dbname=d", "host=h password=******** dbname=d"),
    ("host=h dbname=d", "host=h dbname=d"),
    # libpq skips blanks after '=': the password here really is "dbname=d"
    ("host=h password= dbname=d", "host=h password= ********"),
]


@pytest.mark.parametrize(("raw", "want"), CONNINFO_CASES)
def test_redact_conninfo_golden(raw: str, want: str) -> None:
    assert redact_conninfo(raw) == want
    parsed = conninfo_to_dict(raw)
    secret = str(parsed.get("password") or parsed.get("sslpassword") or "")
    if secret:
        assert secret not in redact_conninfo(raw)


URI_CASES = [
    ("postgresql://bob:s3cret@db:5432/app", "postgresql://bob:********@db:5432/app"),
    ("postgres://bob:p%40ss%3Aw@h1:5432,h2:5433/app?sslmode=require",
     "postgres://bob:********@h1:5432,h2:5433/app?sslmode=require"),
    ("postgresql://h/app?password=x&sslpassword=y&application_name=z",
     "postgresql://h/app?password=********&sslpassword=********&application_name=z"),
    ("postgresql://h/app?pass%77ord=x", "postgresql://h/app?pass%77ord=********"),
    ("postgresql://bob@h/app", "postgresql://bob@h/app"),
    ("postgresql://:pw@h", "postgresql://:********@h"),
    ("postgresql://u:raw/slash@h/db", "postgresql://u:********@h/db"),
    ("POSTGRESQL://u:pw@h", "POSTGRESQL://u:********@h"),
    ("http://u:pw@h", "http://u:pw@h"),
]


@pytest.mark.parametrize(("raw", "want"), URI_CASES)
def test_redact_uri_golden(raw: str, want: str) -> None:
    assert redact_uri(raw) == want


TEXT_CASES = [
    ('pg_dump: error: connection to server failed: "host=db password=s3cret dbname=x"',
     'pg_dump: error: connection to server failed: "host=db password=******** dbname=x"'),
    ("PGPASSWORD='it''s' pg_dump -h db app", "PGPASSWORD='********' pg_dump -h db app"),
    # shell metacharacters glued to a value are hidden too: `env` output and
    # logs are not shell syntax, and hiding a ';' is harmless
    ('export PGSSLPASSWORD="a \\"b\\" c"; psql', 'export PGSSLPASSWORD="********" psql'),
    ("tool --db-password=hunter2 --host=h", "tool --db-password=******** --host=h"),
    ("psql postgresql://u:pw@h/db -c 'select 1'",
     "psql postgresql://u:********@h/db -c 'select 1'"),
    ("ALTER ROLE bob WITH ENCRYPTED PASSWORD 'it''s'; SELECT 1",
     "ALTER ROLE bob WITH ENCRYPTED PASSWORD '********'; SELECT 1"),
    ("host=x password='postgres://u:pw@h' dbname=y", "host=x password='********' dbname=y"),
    ("nothing secret here: host=h port=5432", "nothing secret here: host=h port=5432"),
    ("password=", "password="),
]


@pytest.mark.parametrize(("raw", "want"), TEXT_CASES)
def test_redact_text_golden(raw: str, want: str) -> None:
    assert redact_text(raw) == want


def test_redact_argv_golden() -> None:
    argv = ["pg_dump", "-d", "host=h password=pw dbname=d", "--password", "mydb",
            "--dbname=postgresql://u:pw@h/d", "-dpostgresql://u:pw@h/db", "PGPASSWORD=x y",
            "--api-token=abc", "-h", "h"]
    assert redact_argv(argv) == [
        "pg_dump", "-d", "host=h password=******** dbname=d", "--password", "mydb",
        "--dbname=postgresql://u:********@h/d", "-dpostgresql://u:********@h/db",
        "PGPASSWORD=********", "--api-token=********", "-h", "h"]


def test_pgbackrest_secrets_are_redacted() -> None:
    """pgBackRest's repository keys and passphrases, as `--opt=value`, as
    `--opt value`, in its environment variables and in free text."""
    argv = ["pgbackrest", "--stanza=main", "--repo1-cipher-pass=c1pher",
            "--repo1-s3-key", "AKIAXYZ", "--repo1-s3-key-secret", "s3s3cret",
            "--repo1-sftp-private-key-passphrase=phrase", "--process-max=4", "backup"]
    out = redact_argv(argv)
    assert out == ["pgbackrest", "--stanza=main", f"--repo1-cipher-pass={MASK}",
                   "--repo1-s3-key", MASK, "--repo1-s3-key-secret", MASK,
                   f"--repo1-sftp-private-key-passphrase={MASK}", "--process-max=4", "backup"]
    env = redact_env({"PGBACKREST_REPO1_CIPHER_PASS": "x", "PGBACKREST_REPO1_S3_KEY": "k",
                      "PGBACKREST_STANZA": "main"})
    assert env == {"PGBACKREST_REPO1_CIPHER_PASS": MASK, "PGBACKREST_REPO1_S3_KEY": MASK,
                   "PGBACKREST_STANZA": "main"}
    assert "c1pher" not in redact_text("repo1-cipher-pass=c1pher")


def test_redact_env() -> None:
    env = {"PGPASSWORD": "x", "PGSSLPASSWORD": "y", "AWS_SECRET_ACCESS_KEY": "k",
           "GITHUB_TOKEN": "t", "PGSERVICE": "prod", "PGHOST": "db", "PGPASSFILE": "/p",
           "DATABASE_URL": "postgres://a:b@c/d"}
    assert redact_env(env) == {
        "PGPASSWORD": MASK, "PGSSLPASSWORD": MASK, "AWS_SECRET_ACCESS_KEY": MASK,
        "GITHUB_TOKEN": MASK, "PGSERVICE": "prod", "PGHOST": "db", "PGPASSFILE": "/p",
        "DATABASE_URL": "postgres://a:********@c/d"}


def test_is_secret_key() -> None:
    assert all(map(is_secret_key, ["password", "sslpassword", "PGPASSWORD", "--db-passwd"]))
    assert not any(map(is_secret_key, ["host", "PGPASSFILE", "PWD", "dbname"]))


# ------------------------------------------------------------------ fuzzing

TRICKY = ["'", '"', "\\", " ", "@", ":", "/", "?", "=", "%", "&", "#", "postgres://",
          "password=", "é", "\u2028", "\xa0", "ü@", "%40"]
passwords = st.lists(
    st.one_of(st.characters(blacklist_categories=("Cs", "Cc")), st.sampled_from(TRICKY)),
    min_size=4, max_size=24,
).map("".join).filter(lambda p: len(p) >= 4)
names = st.from_regex(r"[a-z][a-z0-9_]{2,10}", fullmatch=True)
hosts = st.from_regex(r"[a-z][a-z0-9]{2,8}\.example\.com", fullmatch=True)
ports = st.integers(min_value=1024, max_value=65535)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def libpq_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def libpq_escape_bare(value: str) -> str:
    return "".join("\\" + c if c in " \t\n\r\f\v'\\" else c for c in value)


def dq(value: str) -> str:
    """Shell double quotes."""
    return '"' + "".join("\\" + c if c in '"\\$`' else c for c in value) + '"'


def secret_gone(out: str, pw: str) -> None:
    assert pw not in out
    assert quote(pw, safe="") not in out


def usable(pw: str, skeleton: str) -> bool:
    """The password is not accidentally part of the surrounding text."""
    return all(form not in skeleton + MASK * 2 for form in (pw, quote(pw, safe="")))


def conninfo(host: str, port: int, db: str, user: str, pw_value: str) -> str:
    return f"host={host} port={port} dbname={db} user={user} password={pw_value} sslmode=prefer"


@FUZZ
@given(pw=passwords, host=hosts, port=ports, db=names, user=names, bare=st.booleans())
def test_fuzz_conninfo(pw: str, host: str, port: int, db: str, user: str, bare: bool) -> None:
    value = libpq_escape_bare(pw) if bare else libpq_quote(pw)
    raw = conninfo(host, port, db, user, value)
    assert conninfo_to_dict(raw)["password"] == pw  # the generator speaks libpq
    want = conninfo(host, port, db, user, MASK if bare else f"'{MASK}'")
    assume(usable(pw, want))
    out = redact_conninfo(raw)
    assert out == want
    secret_gone(out, pw)
    assert redact_text(raw) == want


def uri(user: str, pw: str, host: str, port: int, db: str) -> str:
    return (f"postgresql://{user}:{pw}@{host}:{port},backup.example.com:5433/{db}"
            f"?sslmode=require&sslpassword={pw}&application_name=pgparmon")


@FUZZ
@given(pw=passwords, host=hosts, port=ports, db=names, user=names)
def test_fuzz_uri(pw: str, host: str, port: int, db: str, user: str) -> None:
    enc = quote(pw, safe="")
    raw = uri(user, enc, host, port, db)
    parsed = conninfo_to_dict(raw)
    assert parsed["password"] == pw and parsed["sslpassword"] == pw
    want = uri(user, MASK, host, port, db)
    assume(usable(pw, want))
    assert redact_uri(raw) == want
    assert redact_conninfo(raw) == want
    assert redact_text(f"could not connect to {raw}: timeout") == (
        f"could not connect to {want}: timeout")


def free_text(pw: str, host: str, port: int, db: str, user: str) -> str:
    ci = conninfo(host, port, db, user, libpq_quote(pw))
    u = uri(user, quote(pw, safe=""), host, port, db)
    sql_literal = "'" + pw.replace("'", "''") + "'"
    return (f'PGPASSWORD={shlex.quote(pw)} pg_dump -d "{ci}" --db-password={shlex.quote(pw)}'
            f"\nexport PGSSLPASSWORD={dq(pw)}; psql {u} -c \"ALTER ROLE {user} PASSWORD "
            f"{sql_literal}\" # {host}")


@FUZZ
@given(pw=passwords, host=hosts, port=ports, db=names, user=names)
def test_fuzz_free_text(pw: str, host: str, port: int, db: str, user: str) -> None:
    # the text with MASK as the password looks like the redacted output
    assume(usable(pw, free_text(MASK, host, port, db, user)))
    out = redact_text(free_text(pw, host, port, db, user))
    secret_gone(out, pw)
    for keep in (host, str(port), f"dbname={db}", f"user={user}", f"postgresql://{user}:"):
        assert keep in out


@FUZZ
@given(pw=passwords, host=hosts, port=ports, db=names, user=names)
def test_fuzz_argv_and_env(pw: str, host: str, port: int, db: str, user: str) -> None:
    ci = conninfo(host, port, db, user, libpq_quote(pw))
    u = uri(user, quote(pw, safe=""), host, port, db)
    argv = ["pg_restore", "-d", ci, f"--dbname={u}", f"PGPASSWORD={pw}", "-h", host,
            f"--secret-token={pw}", "-U", user, f"-d{u}"]
    assume(usable(pw, " ".join(argv[:2] + argv[5:7] + argv[8:10])))
    out = redact_argv(argv)
    for element in out:
        secret_gone(element, pw)
    assert out[2] == conninfo(host, port, db, user, f"'{MASK}'")
    assert out[3] == f"--dbname={uri(user, MASK, host, port, db)}"
    assert out[5:7] == ["-h", host] and out[8:10] == ["-U", user]
    env = redact_env({"PGPASSWORD": pw, "MY_TOKEN": pw, "PGHOST": host, "DATABASE_URL": u})
    assert env["PGHOST"] == host and env["PGPASSWORD"] == MASK and env["MY_TOKEN"] == MASK
    secret_gone(env["DATABASE_URL"], pw)
