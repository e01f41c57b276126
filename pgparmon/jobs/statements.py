"""What a backend's current statement says about the work it does: the
table of a COPY and its direction, the index of a CREATE INDEX, the
constraint of an ALTER TABLE ... ADD CONSTRAINT, the table of a VACUUM or
ANALYZE. Shared by every driver."""

from __future__ import annotations

import re

COPY_FROM = re.compile(r"^\s*copy\s+(.+?)\s*(\(.*\))?\s+from\s", re.IGNORECASE | re.DOTALL)
COPY_TO = re.compile(r"^\s*copy\s+(.+?)\s*(\(.*\))?\s+to\s", re.IGNORECASE | re.DOTALL)
CREATE_INDEX = re.compile(r"^\s*create\s+(?:unique\s+)?index\s+(?:concurrently\s+)?"
                          r"(?:if\s+not\s+exists\s+)?(?:(\"(?:[^\"]|\"\")+\"|\S+)\s+)?on\s",
                          re.IGNORECASE)
ADD_CONSTRAINT = re.compile(r"add\s+constraint\s+(\"(?:[^\"]|\"\")+\"|\S+)", re.IGNORECASE)
MAINT = re.compile(r"^\s*(vacuum|analy[sz]e)\b\s*(?:\([^)]*\)\s*)?"
                   r"(?:(?:full|freeze|verbose|analy[sz]e|skip_locked)\b\s*)*"
                   r"(\"(?:[^\"]|\"\")+\"(?:\.\"(?:[^\"]|\"\")+\"|\.[^\s;,(]+)?|[^\s;,(\"]+)?",
                   re.IGNORECASE)


def copy_target(query: str | None) -> tuple[str, str] | None:
    """('from'|'to', schema.table) of a COPY statement, or None."""
    if not query:
        return None
    m = COPY_FROM.match(query)
    if m:
        return "from", _unquote_rel(m.group(1))
    m = COPY_TO.match(query)
    if m:
        return "to", _unquote_rel(m.group(1))
    return None


def build_target(query: str | None) -> tuple[str, str] | None:
    """('index'|'constraint', name) of an index or constraint build, or None."""
    if not query:
        return None
    m = CREATE_INDEX.match(query)
    if m:  # an unnamed index (CREATE INDEX ON t ...): the server names it
        return "index", ident(m.group(1)) if m.group(1) else ""
    m = ADD_CONSTRAINT.search(query)
    if m:
        return "constraint", ident(m.group(1))
    return None


def maint_target(query: str | None) -> tuple[str, str | None] | None:
    """('vacuum'|'analyze', its first table or None) of a VACUUM or ANALYZE
    statement, or None."""
    if not query:
        return None
    m = MAINT.match(query)
    if not m:
        return None
    kind = "vacuum" if m.group(1).lower() == "vacuum" else "analyze"
    return kind, _unquote_rel(m.group(2)) if m.group(2) else None


def ident(s: str) -> str:
    """An identifier as the catalog spells it: quotes removed, schema dropped."""
    s = s.strip()
    if s.startswith('"') and s.endswith('"'):
        return s[1:-1].replace('""', '"')
    return s.split(".")[-1]


def norm_rel(rel: str | None) -> str | None:
    if rel is None:
        return None
    return ".".join(p.strip('"') for p in rel.split("."))


def _unquote_rel(s: str) -> str:
    s = s.strip()
    if s.upper().startswith("ONLY "):
        s = s[5:].strip()
    parts = re.findall(r'"((?:[^"]|"")*)"|([^."\s]+)', s)
    names = [q.replace('""', '"') if q else u for q, u in parts]
    return ".".join(names[-2:]) if names else s
