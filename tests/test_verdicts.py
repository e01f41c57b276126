"""The verdict kind and warning code registry (pgparmon.verdicts): every
kind a verdict is made with, and every code a warning is made with, is
registered, the core's where the core makes them and each driver's by the
driver (Driver.verdicts), so that the exporter's one-hot series hold them
before they happen (tests/test_exporter.py)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from pgparmon import verdicts
from pgparmon.analyze import bottleneck, warnings
from pgparmon.jobs.registry import all_verdicts, all_warnings, drivers

PKG = Path(__file__).resolve().parent.parent / "pgparmon"


def _made(path: Path, name: str) -> set[str]:
    """The literal first arguments of the calls to `name` in a module."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == name \
                and node.args and isinstance(node.args[0], ast.Constant) \
                and node.args[0].value != "":  # sample.NO_VERDICT: read back, no kind
            out.add(str(node.args[0].value))
    return out


def _with_its_helpers(path: Path) -> set[Path]:
    """A driver's module and the jobs/ modules it imports, and theirs."""
    seen: set[Path] = set()
    todo = [path]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
                todo += [q for n in names if (q := p.parent / f"{n}.py").exists()]
    return seen


def test_every_verdict_and_warning_made_is_registered() -> None:
    files = list(PKG.rglob("*.py"))
    made = set().union(*(_made(p, "Verdict") for p in files))
    assert {"worker-slots", "sync-failing", "throttled"} <= made
    assert made <= set(all_verdicts()), made - set(all_verdicts())
    codes = set().union(*(_made(p, "JobWarning") for p in files))
    assert codes == set(all_warnings()), codes ^ set(all_warnings())


def test_the_judge_registers_the_kinds_it_gives() -> None:
    assert _made(Path(bottleneck.__file__), "Verdict") == set(bottleneck.JUDGED)
    assert _made(Path(warnings.__file__), "JobWarning") == set(warnings.CODES)


@pytest.mark.parametrize("driver", drivers(), ids=lambda d: d.kind)
def test_each_driver_lists_the_verdicts_it_gives(driver: object) -> None:
    path = Path(sys.modules[type(driver).__module__].__file__ or "")
    made = set().union(*(_made(p, "Verdict") for p in _with_its_helpers(path)))
    assert made == set(driver.verdicts), (made, driver.verdicts)  # type: ignore[attr-defined]
    assert set(driver.verdicts) <= set(all_verdicts())  # type: ignore[attr-defined]


def test_a_value_is_registered_once_and_as_a_word() -> None:
    before = verdicts.verdict_kinds()
    verdicts.register_verdicts("client-cpu", "archiving")  # again: no change
    assert verdicts.verdict_kinds() == before
    for bad in ("", "two words", "x" * 41, 'a"b'):
        with pytest.raises(ValueError):
            verdicts.register_verdicts(bad)
    assert verdicts.verdict_kinds() == before
