"""The driver's four narrow protocols (jobs/recognise.py, plan.py,
progress.py, end.py): what a driver must declare, defaults that describe no
tool, and a guard that the core reaches a driver only through them (no
server needed).

The guard (`test_the_core_asks_a_driver_only_through_one_protocol`) reads
every module of pgparmon outside jobs/ and fails on

- an import of the whole `Driver`, a call of `registry.drivers()`, or a
  `driver_for(...)` that is not the argument of a `Tracker(...)` (the
  Tracker is the one holder of a whole driver);
- an attribute read on a driver expression that is no member of the
  protocol the expression has: a call of `recognise_of / plan_of /
  progress_of / end_of(tracker)` or of the registry's `recognisers(),
  recognise_for / plan_for / progress_for(kind)`, a name bound from one
  (an assignment, a loop, a comprehension, `next(...)`), a parameter,
  variable or method result annotated with a protocol;
- `x.driver.NAME` anywhere but in the Tracker (analyze/progress.py), whose
  own `TrackedDriver` protocol must then list NAME, and every one of whose
  members must be a member of Recognise or Progress.

ALLOWED lists the one place left, with why.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from pgparmon.analyze.progress import TrackedDriver
from pgparmon.jobs import registry
from pgparmon.jobs.base import Driver, End, Plan, PlanInputs, Progress, Recognise, undeclared
from pgparmon.jobs.registry import DriverError
from pgparmon.snapshot import Backend

ROOT = Path(__file__).resolve().parent.parent / "pgparmon"
PROTOCOLS: dict[str, type] = {"Recognise": Recognise, "Plan": Plan, "Progress": Progress,
                              "End": End}
# a call of one of these gives one driver as that protocol
ONE = {"recognise_of": "Recognise", "plan_of": "Plan", "progress_of": "Progress",
       "end_of": "End", "recognise_for": "Recognise", "plan_for": "Plan",
       "progress_for": "Progress", "driver_for_argv": "Recognise"}
# a call of one of these gives several
MANY = {"recognisers": "Recognise"}
ALLOWED = {
    ("advise/history.py", ".driver.plan"): "advise/ replays a recorded job's plan through "
                                           "its Tracker's driver (a Plan member); advise/ "
                                           "is changed on its own branch",
}


def members(proto: type) -> set[str]:
    """Its methods and attributes, those a Protocol only annotates too."""
    names = set(dir(proto)) | {n for c in proto.__mro__ for n in vars(c).get("__annotations__", {})}
    return {n for n in names if not n.startswith("_")}


# ---- what a driver must say -------------------------------------------------


def test_every_built_in_driver_declares_what_it_must() -> None:
    assert {d.kind: undeclared(d) for d in registry.drivers()} == \
        {d.kind: [] for d in registry.drivers()}


def test_every_built_in_driver_states_what_its_tool_is() -> None:
    """The defaults describe no tool, so each built-in driver says in its
    own class which way its data flows and whether its worker processes
    live to the end (a dump's do: one gone early died)."""
    unsaid = [f"{d.kind}: {name}" for d in registry.drivers()
              for name in ("kind", "data_flow", "fixed_workers")
              if name not in type(d).__dict__]
    assert unsaid == []
    assert {d.kind for d in registry.drivers() if d.fixed_workers} == \
        {"pg_dump", "pg_restore", "vacuumdb"}


class Nameless(Driver):
    """A loader that forgot its kind."""

    def session_key(self, b: Backend) -> tuple[object, ...] | None:
        return None


class PlansNothing(Driver):
    kind = "plans-nothing"
    plans_work = True  # but no plan of its own


class KeysOnly(Driver):
    """Claims sessions by a key, but makes no job of them and has no rule."""

    kind = "keys-only"

    def session_key(self, b: Backend) -> tuple[object, ...] | None:
        return ("keys-only",)


class Sideways(Driver):
    kind = "sideways"
    data_flow = "sideways"


@pytest.mark.parametrize(("driver", "said"), [
    (Nameless(), "no kind"),
    (PlansNothing(), "plans_work without a plan of its own"),
    (KeysOnly(), "session_key without from_sessions"),
    (KeysOnly(), "session_key without session_matches or belongs"),
    (Sideways(), "data_flow 'sideways'"),
], ids=["kind", "plan", "from_sessions", "grouping rule", "data flow"])
def test_a_driver_that_leaves_a_declaration_out_is_refused(driver: Driver, said: str) -> None:
    kinds = [d.kind for d in registry.drivers()]
    with pytest.raises(DriverError, match=said):
        registry.register(driver)
    assert [d.kind for d in registry.drivers()] == kinds  # nothing registered


def test_the_defaults_describe_no_tool() -> None:
    """A driver that says nothing but its kind: no program, no session
    prefix, no data flow, no plan, no worker taken for dead, no leader, no
    words of its own."""

    class Bare(Driver):
        kind = "bare"

    d = Bare()
    assert undeclared(d) == []
    assert (d.programs, d.session_apps.prefixes, d.sample_parts, d.client_specs) == \
        ((), (), (), {})
    assert d.data_flow is None and not d.plans_work and not d.fixed_workers
    assert not (d.has_leader or d.host_only or d.whole_cluster or d.all_databases
                or d.writes_target_files or d.fails_on_lock_queue or d.runs_as_step)
    assert (d.advice_terms, d.no_jobs_advice, d.phases, d.verdicts) == ((), None, (), ())
    assert d.session_key(_backend()) is None and d.new_state() is None


def test_a_driver_plans_when_it_has_a_plan_unless_it_says_otherwise() -> None:
    class Planner(Driver):
        kind = "planner"

        def plan(self, tr: Any, inputs: PlanInputs) -> bool:
            return True

    class Declines(Planner):
        plans_work = False  # has one, but plans only when asked elsewhere

    class Inherits(Declines):
        pass

    class Says(Driver):
        kind = "says"
        plans_work = True

        def plan(self, tr: Any, inputs: PlanInputs) -> bool:
            return True

    assert Planner.plans_work and not Declines.plans_work and not Inherits.plans_work
    assert Says.plans_work and not Driver.plans_work


def test_the_protocols_share_no_member() -> None:
    seen: dict[str, str] = {}
    for name, proto in PROTOCOLS.items():
        for m in members(proto):
            assert m not in seen, f"{m} is in {seen.get(m)} and {name}"
            seen[m] = name
    assert members(Driver) == set(seen)


def _backend() -> Backend:
    return Backend(pid=1, datname="db", usename="u", application_name="x", client_addr=None,
                   client_port=-1, backend_start=0.0, xact_start=None, query_start=None,
                   state="idle", wait_event_type=None, wait_event=None,
                   backend_type="client backend", backend_xmin=None, leader_pid=None,
                   query="")


# ---- the guard ---------------------------------------------------------------


# the protocol names the module being checked imports from jobs/: a name
# of its own (advise/probe/plan.py's Plan, the probe's plan of steps) is
# not the driver's protocol
_IMPORTED: set[str] = set()


def _jobs_imports(tree: ast.AST) -> set[str]:
    return {a.asname or a.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and "jobs" in (node.module or "").split(".")
            for a in node.names if a.name in PROTOCOLS}


def _annotation_protocol(node: ast.AST | None) -> tuple[str, bool] | None:
    """(protocol, several) an annotation names: `Recognise`, `Plan | None`,
    `list[Recognise]`, `Iterable[Recognise]`; a string annotation too."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(node, ast.Name) and node.id in PROTOCOLS and node.id in _IMPORTED:
        return node.id, False
    if isinstance(node, ast.BinOp):  # X | None
        return _annotation_protocol(node.left) or _annotation_protocol(node.right)
    if isinstance(node, ast.Subscript):
        inner = _annotation_protocol(node.slice)
        return (inner[0], True) if inner else None
    return None


class _Scope:
    """What the names of one function (or module) are, as far as drivers go."""

    def __init__(self, returns: dict[str, tuple[str, bool]]) -> None:
        self.names: dict[str, tuple[str, bool]] = {}
        self.returns = returns  # method / function name -> what it returns

    def typed(self, node: ast.AST) -> tuple[str, bool] | None:
        if isinstance(node, ast.Name):
            return self.names.get(node.id)
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else None
            if name in ONE:
                return ONE[name], False
            if name in MANY:
                return MANY[name], True
            if name == "next" and node.args:
                inner = self.typed(node.args[0])
                return (inner[0], False) if inner else None
            if name in ("list", "sorted", "tuple") and node.args:
                return self.typed(node.args[0])
            if name in self.returns:
                return self.returns[name]
            return None
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            self.comprehension(node.generators)
            inner = self.typed(node.elt)
            return (inner[0], True) if inner else None
        if isinstance(node, ast.IfExp):
            return self.typed(node.body) or self.typed(node.orelse)
        if isinstance(node, ast.Subscript):
            inner = self.typed(node.value)
            return (inner[0], False) if inner and inner[1] else None
        return None

    def bind(self, target: ast.AST, what: tuple[str, bool] | None) -> None:
        if what is not None and isinstance(target, ast.Name):
            self.names[target.id] = what

    def comprehension(self, gens: list[ast.comprehension]) -> None:
        for g in gens:
            it = self.typed(g.iter)
            if it and it[1]:
                self.bind(g.target, (it[0], False))


def _returns(tree: ast.AST) -> dict[str, tuple[str, bool]]:
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            p = _annotation_protocol(node.returns)
            if p:
                out[node.name] = p
    return out


def _bindings(scope: _Scope, body: ast.AST) -> None:
    """Bind the names of a function (in source order, nested blocks too)."""
    if isinstance(body, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for a in (*body.args.posonlyargs, *body.args.args, *body.args.kwonlyargs):
            scope.bind(ast.Name(a.arg), _annotation_protocol(a.annotation))
    nodes = sorted((n for n in ast.walk(body) if hasattr(n, "lineno")),
                   key=lambda n: (n.lineno, n.col_offset))
    for node in nodes:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                scope.bind(t, scope.typed(node.value))
                if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    for tt, vv in zip(t.elts, node.value.elts, strict=False):
                        scope.bind(tt, scope.typed(vv))
        elif isinstance(node, ast.AnnAssign):
            scope.bind(node.target, _annotation_protocol(node.annotation)
                       or (scope.typed(node.value) if node.value else None))
        elif isinstance(node, ast.NamedExpr):
            scope.bind(node.target, scope.typed(node.value))
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            it = scope.typed(node.iter)
            if it and it[1]:
                scope.bind(node.target, (it[0], False))
        elif isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
            scope.comprehension(node.generators)


def _driver_attr(node: ast.Attribute) -> str | None:
    """NAME of `x.driver.NAME`."""
    v = node.value
    return node.attr if isinstance(v, ast.Attribute) and v.attr == "driver" else None


def _imports_and_calls(rel: str, tree: ast.AST) -> list[str]:
    found = []
    parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and "jobs" in (node.module or "").split("."):
            found += [f"{rel}:{node.lineno}: imports the whole Driver"
                      for a in node.names if a.name == "Driver"]
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else None
            if name == "drivers":
                found.append(f"{rel}:{node.lineno}: drivers() (recognisers() instead)")
            if name == "driver_for":
                p = parents.get(node)
                if not (isinstance(p, ast.Call) and isinstance(p.func, ast.Name)
                        and p.func.id == "Tracker" and node in p.args):
                    found.append(f"{rel}:{node.lineno}: driver_for() outside Tracker(...)")
    return found


def check_module(rel: str, source: str) -> list[str]:
    """What the guard finds in one module outside jobs/."""
    tree = ast.parse(source)
    _IMPORTED.clear()
    _IMPORTED.update(_jobs_imports(tree))
    found = _imports_and_calls(rel, tree)
    returns = _returns(tree)
    tracked = members(TrackedDriver) if rel == "analyze/progress.py" else set()
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for body in [tree, *scopes]:
        scope = _Scope(returns)
        _bindings(scope, body)
        for node in ast.walk(body):
            if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
                continue
            what = scope.typed(node.value)
            if what and not what[1] and node.attr not in members(PROTOCOLS[what[0]]):
                found.append(f"{rel}:{node.lineno}: {node.attr} is no {what[0]} member")
            name = _driver_attr(node)
            if name is not None and body is tree and name not in tracked \
                    and (rel, f".driver.{name}") not in ALLOWED:
                found.append(f"{rel}:{node.lineno}: .driver.{name} (ask through a protocol)")
    return sorted(set(found))


def test_the_core_asks_a_driver_only_through_one_protocol() -> None:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("jobs/"):
            continue
        found += check_module(rel, path.read_text(encoding="utf-8"))
    assert found == []


def test_the_trackers_questions_are_the_protocols() -> None:
    """The Tracker sits below the drivers (they import it), so it names
    what it asks in a Protocol of its own: each of its members is one of
    Recognise's or Progress's."""
    asked = members(TrackedDriver)
    assert asked and asked <= members(Recognise) | members(Progress)


def test_the_guard_reads_a_modules_own_names_as_its_own() -> None:
    """A class of the module's own named like a protocol (the probe's plan
    of steps is a `Plan`) is not the driver's protocol."""
    own = "class Plan:\n    skipped = ()\n\ndef f(plan: Plan):\n    return plan.skipped\n"
    assert check_module("y.py", own) == []
    imported = "from ..jobs.plan import Plan\n" + own.split("\n\n", 1)[1]
    assert [f.split(": ", 1)[1] for f in check_module("y.py", imported)] == [
        "skipped is no Plan member"]


def test_the_guard_finds_what_it_looks_for() -> None:
    bad = '''
from ..jobs.base import Driver
from ..jobs.registry import driver_for, drivers, recognisers
from ..jobs.end import end_of
from ..jobs.recognise import Recognise

def a(tr):
    end_of(tr).plan(tr, None)
    e = end_of(tr)
    return e.fixed_workers, e.own_eta(tr)

def b(kind, driver: Recognise):
    t = Tracker(job, driver_for(kind))
    x = driver_for(kind).data_flow
    for d in recognisers():
        d.read_plan(None, {})
    found = next((d for d in recognisers() if d.host_only), None)
    return found.verdicts, driver.job_fields, t.driver.plans_work, drivers()
'''
    lines = [f.split(":", 2)[1] + ":" + f.split(": ", 1)[1] for f in check_module("x.py", bad)]
    assert lines == sorted([
        "2:imports the whole Driver",
        "8:plan is no End member",
        "10:own_eta is no End member",
        "14:driver_for() outside Tracker(...)",
        "16:read_plan is no Recognise member",
        "18:verdicts is no Recognise member",
        "18:job_fields is no Recognise member",
        "18:.driver.plans_work (ask through a protocol)",
        "18:drivers() (recognisers() instead)",
    ])


# ---- shared helpers ------------------------------------------------------------


def test_no_driver_borrows_from_another_drivers_module() -> None:
    """A driver's module imports shared modules (jobs/grouping.py,
    tables.py, backup_rows.py...), never the module of another registered
    driver."""
    mods = {type(d).__module__.rsplit(".", 1)[-1] for d in registry.drivers()}
    found = []
    for name in sorted(mods):
        tree = ast.parse((ROOT / "jobs" / f"{name}.py").read_text(encoding="utf-8"))
        found += [f"{name} imports {other}" for other in _imported_siblings(tree)
                  if other in mods and other != name]
    assert found == []
    # the check finds what it looks for
    assert _imported_siblings(ast.parse("from .pg_dump import x\nfrom . import copy, walwait\n"
                                        "from ..analyze import eta\n")) == \
        ["pg_dump", "copy", "walwait"]


def _imported_siblings(tree: ast.AST) -> list[str]:
    """The modules of jobs/ a module of jobs/ imports (`from .x import`,
    `from . import x`)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            out += [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
    return out
