"""What the core knows of the tool kinds it reads from the drivers: the
sample's application_name regexes, the kinds messages list, the item kinds
a summary names; and a guard that no module outside pgparmon/jobs/ names a
kind or a tool's program itself (no server needed).

The guard (`test_no_kind_names_outside_the_drivers`) reads every module of
pgparmon outside jobs/ and the advice strategies and fails on

- a string literal (not a docstring) equal to a registered kind, program,
  client program or session application_name prefix;
- a literal that is a regex (or SQL's) and names one of them as a word;
- a comparison of a kind (`x.kind`, `kind`, `job_kind`) with == / != /
  in / not in against such a literal, and any comparison of a job's kind
  (`job.kind`, `...job.kind`) with a literal at all;

and every SQL file of pgparmon/sql that no driver reads as its own part,
for a quoted literal naming one. A name that is also a worker phase's or an
item kind's ("copy": the COPY phase of every job, and its items) is a kind
check only when compared with a job's kind. ALLOWED lists the few places
that run or print a tool themselves, each with why.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgparmon import item_kinds, sql
from pgparmon.discover import DiscoveryError, choose_job
from pgparmon.jobs import registry
from pgparmon.jobs.base import Driver, SessionApps
from pgparmon.readers.db import NO_APPS
from pgparmon.views.summary import ItemGroup

ROOT = Path(__file__).resolve().parent.parent / "pgparmon"
SQL_DIR = Path(sql.__file__).resolve().parent

# modules read as a whole by their own rules: the advice strategies (one
# per kind of advice, keyed by the job kinds whose recordings they read)
SKIPPED_MODULES = {
    "advise/strategies.py": "the advice strategies: each names the tool it advises",
    "advise/kinds.py": "the advice kinds: each names the job kind its recordings carry",
}
# (module, name): a literal naming a tool that is no kind check
ALLOWED = {
    ("demo.py", "pg_dump"): "the demo starts a pg_dump itself",
    ("demo.py", "pg_restore"): "the demo starts a pg_restore itself",
    ("toc.py", "pg_restore"): "reads an archive's TOC by running pg_restore -l itself, "
                              "and strips its program name from its errors",
    ("toc.py", "pg_dump"): "strips pg_dump's program name from pg_restore's errors",
    ("cluster.py", "psql"): "the throwaway clusters run their SQL through psql",
    ("advise/probe/psql.py", "psql"): "the probe runs psql itself and reads its errors",
    ("advise/copyadvice.py", "psql"): "the COPY advice prints the psql command to run",
    ("advise/subscription.py", "psql"): "the subscription advice prints the psql command "
                                        "to run",
}
# regex metacharacters that make a literal a pattern (or SQL's)
PATTERN = re.compile(r"\^|\(\?|\\[sdwb]|\$\)|~\*?\s*'|\|")


def _names() -> dict[str, str]:
    """Every name that says which tool a job is: name -> what it is."""
    out: dict[str, str] = {}
    for d in registry.drivers():
        out.setdefault(d.kind, f"the kind {d.kind}")
        for p in (*d.programs, *d.client_specs, *d.session_apps.prefixes):
            out.setdefault(p, f"a program of {d.kind}")
    return out


def _shared() -> set[str]:
    """Names that are a worker phase's or an item kind's too ("copy")."""
    registry.drivers()
    return {p.name for p in registry.all_phases()} | set(item_kinds.names())


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for n in ast.walk(tree):
        body = getattr(n, "body", None)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            out.add(id(body[0].value))
    return out


def _literals(node: ast.AST) -> list[str]:
    """The string literals a comparison's side holds (one, or a tuple's)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _literals(e)]
    return []


def _is_kind(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "kind") or \
        (isinstance(node, ast.Name) and node.id in ("kind", "job_kind"))


def _is_job_kind(node: ast.AST) -> bool:
    """`job.kind`, `tr.job.kind`, `self.job.kind`, `job_kind`."""
    if isinstance(node, ast.Name):
        return node.id == "job_kind"
    return isinstance(node, ast.Attribute) and node.attr == "kind" and (
        (isinstance(node.value, ast.Name) and node.value.id == "job")
        or (isinstance(node.value, ast.Attribute) and node.value.attr == "job"))


def _named(text: str, names: dict[str, str]) -> list[str]:
    return [n for n in names if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text)]


def kind_findings(source: str, where: str, names: dict[str, str],
                  shared: set[str]) -> Iterator[str]:
    """What one module's source names of the tool kinds (see the module's
    docstring): one line each."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    compared: set[int] = set()
    for n in ast.walk(tree):
        if not isinstance(n, ast.Compare):
            continue
        sides = [n.left, *n.comparators]
        if not any(_is_kind(s) for s in sides):
            continue
        lits = [(s, v) for s in sides for v in _literals(s)]
        job = any(_is_job_kind(s) for s in sides)
        bad = [v for _, v in lits if job or (v in names and v not in shared)]
        if bad:
            yield f"{where}:{n.lineno}: a kind check against {bad}: {ast.unparse(n)}"
        compared.update(id(c) for s in sides for c in ast.walk(s))
    for n in ast.walk(tree):
        if not isinstance(n, ast.Constant) or not isinstance(n.value, str) \
                or id(n) in docs or id(n) in compared:
            continue
        v = n.value
        hits = [v] if v in names and v not in shared else []
        if not hits and PATTERN.search(v):
            hits = [h for h in _named(v, names) if h not in shared]
        for h in hits:
            if (where, h) not in ALLOWED:
                yield f"{where}:{n.lineno}: names {h} ({names[h]}): {v[:80]!r}"


def _driver_parts() -> set[str]:
    return {p for d in registry.drivers() for p in (*d.sample_parts, *d.follow_parts)}


def sql_findings(text: str, where: str, names: dict[str, str],
                 shared: set[str]) -> Iterator[str]:
    """A SQL file's quoted literals that name a tool (comments left out;
    "copy" is SQL's COPY there)."""
    for i, line in enumerate(text.splitlines(), 1):
        code = line.split("--", 1)[0]
        for lit in re.findall(r"'((?:[^']|'')*)'", code):
            for h in _named(lit, names):
                if h not in shared:
                    yield f"{where}:{i}: names {h} ({names[h]}): '{lit}'"


def test_no_kind_names_outside_the_drivers() -> None:
    names, shared = _names(), _shared()
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("jobs/") or rel in SKIPPED_MODULES:
            continue
        found.extend(kind_findings(path.read_text(encoding="utf-8"), rel, names, shared))
    parts = _driver_parts()
    for path in sorted(SQL_DIR.glob("*.sql")):
        if path.stem.rpartition("_")[0] in parts:
            continue  # a driver's own query (Driver.sample_parts, follow_parts)
        found.extend(sql_findings(path.read_text(encoding="utf-8"), f"sql/{path.name}", names,
                                  shared))
    assert not found, "kind or program names outside pgparmon/jobs/:\n" + "\n".join(found)
    # every allowance is still needed (a stale one would hide a new literal)
    used = {(rel, h) for rel, h in ALLOWED
            if any(h in _named(c.value, names) or c.value == h
                   for c in ast.walk(ast.parse((ROOT / rel).read_text(encoding="utf-8")))
                   if isinstance(c, ast.Constant) and isinstance(c.value, str))}
    assert used == set(ALLOWED), set(ALLOWED) - used


PLANTED = '''
"""A module docstring naming pg_dump is fine."""
import re
DEFAULT = "pg_dump"
APP = re.compile(r"^(pgBackRest|other)")
SQL = "WHERE a.application_name ~ '^pg_basebackup'"


def f(job, w, it):
    """pg_restore in a docstring is fine."""
    if job.kind == "vacuumdb":
        return 1
    if w.kind in ("pg_restore", "x"):
        return 2
    if tr.job.kind != "anything":
        return 3
    if w.phase == "copy" or it.kind == "copy":  # a phase, an item kind
        return 4
    return "pg_dump -Fd (a message)"
'''


def test_the_guard_finds_planted_names() -> None:
    """The guard can fail: each planted kind check and literal is found,
    and the docstrings, messages and phase checks beside them are not."""
    found = list(kind_findings(PLANTED, "planted.py", _names(), _shared()))
    lines = {int(f.split(":")[1]) for f in found}
    assert lines == {4, 5, 6, 11, 13, 15}, found
    assert any("vacuumdb" in f and "kind check" in f for f in found)
    assert list(sql_findings("SELECT 1 -- pg_dump's\nWHERE x ~ '^(pg_dump|y)' AND q ~ 'copy'",
                             "q.sql", _names(), _shared())) == ["q.sql:2: names pg_dump (the kind pg_dump): "
                                            "'^(pg_dump|y)'"]


# ---- what the core reads from the drivers -----------------------------------


class Tagged(Driver):
    """A tool whose sessions name themselves 'tag.tool' (a regex's dot)."""

    kind = "tagged"
    title = "tagged run"
    session_apps = SessionApps(("tag.tool",), query_text=True, idle=True)
    item_kinds = (item_kinds.ItemKind("tag-step", "tag steps"),)


@pytest.fixture
def tagged() -> Iterator[None]:
    registry.register(Tagged())
    yield
    registry.unregister("tagged")


def test_the_sample_regexes_are_the_drivers_prefixes() -> None:
    """The built-in drivers' regexes are those sql/sample_*.sql spelt
    before they were declared (the same sessions sampled, the same text
    kept)."""
    assert registry.sample_apps() == {
        "app_text": "^(pg_dump|pg_restore|pgBackRest)",
        "app_idle": "^(pg_dump|pg_restore|pg_basebackup|pgBackRest|pg_probackup)",
        "app_repl": "^(pg_basebackup|pg_probackup)"}
    assert set(registry.sample_apps()) == set(NO_APPS)
    assert registry.sample_extras()["apps"] == registry.job_extras("pg_dump")["apps"]
    for name in ("sample_100000", "sample_170000"):
        text = (SQL_DIR / f"{name}.sql").read_text(encoding="utf-8")
        assert all(f"%({k})s::text" in text for k in NO_APPS)


def test_a_new_drivers_prefix_joins_the_regexes_literally(tagged: None) -> None:
    apps = registry.sample_apps()
    assert apps["app_text"] == r"^(pg_dump|pg_restore|pgBackRest|tag\.tool)"
    assert apps["app_repl"] == "^(pg_basebackup|pg_probackup)"
    rx = re.compile(apps["app_idle"] or "")
    assert rx.match("tag.tool worker 2") and not rx.match("tagXtool") \
        and not rx.match("a tag.tool")
    registry.unregister("tagged")
    assert "tag" not in (registry.sample_apps()["app_text"] or "")
    assert registry.prefix_regex(()) is None and registry.prefix_regex(["", "a"]) == "^(a)"


def test_messages_list_the_registered_kinds(tagged: None) -> None:
    with pytest.raises(DiscoveryError) as none:
        choose_job([], None)
    msg = str(none.value)
    assert msg.startswith("no running pg_dump, pg_restore, ") and "tagged run" in msg
    assert "pgBackRest restore" not in msg  # host-only: not looked for on a server
    with pytest.raises(DiscoveryError) as pid:
        choose_job([], 4242, host_only=True)
    assert str(pid.value).startswith("no pgBackRest restore job with pid 4242 on this host")


def test_a_summary_names_item_kinds_from_their_registry(tagged: None) -> None:
    def group(kind: str) -> str:
        return ItemGroup(kind, 3, 1.0, 2.0, None, None, 1).name

    assert group("data").startswith("3 small tables, done")
    assert group("fk").startswith("3 foreign keys")
    assert group("tag-step").startswith("3 tag steps")  # the driver's own
    assert group("backup").startswith("3 backup items")  # declared, no plural
    assert group("").startswith("3 other items")
    with pytest.raises(ValueError, match="registered already"):
        item_kinds.register(item_kinds.ItemKind("data", "rows"))
