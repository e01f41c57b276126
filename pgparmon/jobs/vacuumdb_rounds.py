"""Following vacuumdb through its rounds: which round and table each of its
sessions works on, and the evidence that settles the tables nobody saw run.

A session belongs to one round: vacuumdb connects anew for each database
and each stage, opens a round's -j connections as it hands out the round's
first tables (the first one before it lists the tables), and closes them
all at the round's end, before the next round's first connection; the
rounds never overlap. What says which round a session serves, and when it
arrives (a sample every interval; a stage's first statement on each
connection, `SET default_statistics_target=1; SET vacuum_cost_delay=0;`,
`...=10; RESET vacuum_cost_delay;`, `RESET default_statistics_target;`,
is followed by its first ANALYZE within microseconds, and a session not yet
followed shows only its first word: no sample carries it):
- its ANALYZE's progress row, once it samples (pg_stat_progress_analyze's
  sample_blks_total): at most 300 blocks per unit of the round's statistics
  target (300 at the first stage, 3000 at the second), so a larger sample
  is a later stage's. --analyze-in-stages' first stage runs without the
  cost-based delay and is often over before a sample sees it;
- its start: a session that began after every session of the round
  running now, once that round has all its connections, is the next
  round's; one that began while the round's sessions were there is that
  round's;
- its table: one the round running now has done already or gives another
  session is the next round's (the next stage starts with the largest
  table again);
- at the first sight of the job, the statistics read with the plan: the
  first stage is over for a session that began after every table of it
  was analyzed since the process began (an ANALYZE shows there as it
  ends, while its stage's sessions are still there).
Else it is one of the round's connections opened late. A session is placed
again as its evidence comes (its progress row a sample later), and only
ever into a later round: the job never moves back.

What no sample saw (a table that took less than a sample's interval):
- a round entered ends every round before it (vacuumdb moves on only once
  every table of a round is done);
- vacuumdb hands tables out largest first: a table larger than one being
  worked on now was handed out before it, so it is done unless it runs;
- a table vacuumed or analyzed by hand since its round began (the
  statistics: last_vacuum, last_analyze), read with every sample in the
  database the monitor is connected to (sql/vacuumdb_done_*.sql, this
  kind's sample part), and at the end in every database with tables left
  (what finished after the last sample).
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import TYPE_CHECKING, Any

from ..snapshot import Backend, MaintProgress
from .vacuumdb_options import STAGE_NAMES, name_parts, table_part
from .base import state_of
from .vacuumdb_plan import NO_ANALYZE, VacState, add_unplanned, first_round

if TYPE_CHECKING:
    from ..analyze.items import Item
    from ..analyze.progress import Tracker
    from .base import EndContext


@dataclass
class VacHolder:
    """The driver's state (Driver.new_state): its VacState once planned."""

    st: VacState | None = None


def state(tr: Tracker) -> VacState | None:
    return state_of(tr, VacHolder).st


def statement_table(query: str | None) -> str | None:
    """The table of vacuumdb's statement (`VACUUM (ANALYZE) public."T";`,
    `ANALYZE s.t(a, b);`) as schema.table in the catalog's spelling; None
    for a statement on no table (VACUUM (ONLY_DATABASE_STATS)) or a text cut
    to its first word."""
    if not query:
        return None
    q = query.strip().rstrip(";").strip()
    word, _, rest = q.partition(" ")
    if word.upper() not in ("VACUUM", "ANALYZE", "ANALYSE"):
        return None
    rest = rest.strip()
    if rest.startswith("("):
        depth, i = 0, 0
        for i, ch in enumerate(rest):
            depth += (ch == "(") - (ch == ")")
            if depth == 0:
                break
        rest = rest[i + 1:].strip()
    rest = table_part(rest)
    if not rest:
        return None
    parts = name_parts(rest)
    return ".".join(parts[-2:]) if len(parts) >= 2 else None


def locate(tr: Tracker, st: VacState, b: Backend, rel: str | None,
           mp: MaintProgress | None) -> str | None:
    """The item of the statement a session runs (Driver.maint_item)."""
    prev = st.stmts.get(b.pid)
    if prev is not None and prev[0] == b.query_start and prev[1] in tr.items \
            and _known_round(tr, st, b, mp) == st.round_of.get(prev[1]):
        return prev[1]  # the same statement as last sample, in the same round
    oid = mp.relid if mp is not None and mp.relid else None
    name = statement_table(b.query)
    if name is None and b.waiting_for and b.waiting_for[0] == "relation" \
            and len(b.waiting_for) > 2:
        name = b.waiting_for[2]  # queued for its table's lock: no progress row yet
    if name is None and mp is not None and mp.relation:
        name = mp.relation
    if name is None and rel and "." in rel:
        name = rel
    db = b.datname or ""
    if oid is None and name is None:
        # its text cut to its first word (a session not followed yet): named next sample
        st.unmapped = st.unmapped or _on_a_table(b.query)
        return None
    r = _session_round(tr, st, b, oid, name, mp)
    key = _lookup(st, r, db, oid, name)
    if key is None:
        if name is None:  # a progress row of a relation the plan does not know
            st.unmapped = True
            return None
        key = add_unplanned(tr, st, r, db, name)
    st.stmts[b.pid] = (b.query_start, key)
    handed_out(st, key, tr.items[key].size)
    return key


def _on_a_table(query: str | None) -> bool:
    """A statement whose table is not known: cut to its first word (a
    session not yet followed), not one on no table."""
    return not query or len(query.split()) <= 1


def _lookup(st: VacState, r: int, db: str, oid: int | None, name: str | None) -> str | None:
    if oid is not None:
        key = st.by_oid.get((r, db, oid))
        if key is not None:
            return key
    return st.by_name.get((r, db, name)) if name else None


def began(tr: Tracker) -> float | None:
    """When the client process began (None: not seen)."""
    return tr.started if tr.started_from == "client process" else None


def _session_round(tr: Tracker, st: VacState, b: Backend, oid: int | None,
                   name: str | None, mp: MaintProgress | None = None) -> int:
    """The round a session works in: settled when it is first seen, moved
    on (never back) when later evidence says a later round."""
    r = _known_round(tr, st, b, mp)
    if r is None:
        db = b.datname or ""
        if st.cur is None:
            r = first_round(st, db, b.backend_start, began(tr))
        else:
            r = _next_round(tr, st, b, oid, name)
        r = _evidence_round(st, r, db, mp)
    _place(tr, st, b, r)
    return r


def _known_round(tr: Tracker, st: VacState, b: Backend, mp: MaintProgress | None) -> int | None:
    """The round of a session seen before, moved on by what this sample
    shows (None: a session not seen before). Rounds never overlap: one
    alive while a later round runs is that round's (it was taken for an
    earlier one before that round's evidence came)."""
    known = st.sessions.get(b.pid)
    if known is None or known[0] != b.backend_start:
        return None
    r = known[1]
    if st.cur is not None and st.cur > r and st.rounds[st.cur].db == st.rounds[r].db:
        r = st.cur
    return _evidence_round(st, r, b.datname or "", mp)


def _place(tr: Tracker, st: VacState, b: Backend, r: int) -> None:
    was = st.sessions.get(b.pid)
    st.sessions[b.pid] = (b.backend_start, r)
    if was is not None and was[0] == b.backend_start and was[1] != r:
        # moved on: the round it was taken for began with another session, if any
        old = st.rounds[was[1]]
        old.start = min((s[0] for s in st.sessions.values() if s[1] == was[1]
                         and s[0] is not None), default=None)
    enter(tr, st, r)
    rd = st.rounds[r]
    if b.backend_start is not None and (rd.start is None or b.backend_start < rd.start):
        rd.start = b.backend_start


def _evidence_round(st: VacState, r: int, db: str, mp: MaintProgress | None) -> int:
    """Round r, or a later one of the same database where the session's
    ANALYZE samples more blocks than round r's statistics target lets it
    (pg_stat_progress_analyze's sample_blks_total: at most 300 x the target
    blocks, 300 at --analyze-in-stages' first stage, 3000 at its second):
    the earliest round whose target allows it."""
    if mp is None or not mp.relid or not mp.blocks_total or mp.command != "ANALYZE" \
            or "acquiring sample rows" not in (mp.phase or "").lower():
        return r
    for later in range(r, len(st.rounds)):
        if st.rounds[later].db != db:
            continue
        key = st.by_oid.get((later, db, int(mp.relid)))
        if key is None:
            return r  # a table this round does not take: no evidence
        cap = st.parts[key].cap
        if not cap or mp.blocks_total <= cap:
            return later
    return r


def _later(st: VacState, db: str) -> int | None:
    assert st.cur is not None
    return next((r for r in range(st.cur + 1, len(st.rounds)) if st.rounds[r].db == db), None)


def _connections(st: VacState, r: int) -> int | None:
    """How many connections vacuumdb opens for round r: -j of them, no more
    than the round has tables (one without -j); None when its command line
    is not known."""
    if st.inferred:
        return None
    return max(1, min(st.opts.jobs or 1, len(st.rounds[r].keys)))


def _next_round(tr: Tracker, st: VacState, b: Backend, oid: int | None,
                name: str | None) -> int:
    """A session not seen before, while round `cur` runs: vacuumdb opens a
    round's connections as it hands out the round's first tables, and
    closes them all at the round's end, so a session is the next round's
    when it began after every session of round `cur` began and that round
    has all its connections already, or when its table is one the round
    has done or gives another session (the next stage starts with the
    largest table again); it is round `cur`'s when it began while that
    round's sessions were there, or when nothing says otherwise (one of
    the round's connections opened late)."""
    assert st.cur is not None
    cur, db = st.cur, b.datname or ""
    rd = st.rounds[cur]
    if rd.db != db:
        return _later(st, db) or cur
    mine = [s for pid, s in st.sessions.items() if s[1] == cur and pid != b.pid]
    want = _connections(st, cur)
    if want is not None and len(mine) >= want and b.backend_start is not None \
            and all(s[0] is not None and s[0] < b.backend_start for s in mine):
        return _later(st, db) or cur
    if rd.seen is not None and b.backend_start is not None and b.backend_start <= rd.seen:
        return cur  # it began while the round's sessions were there
    key = _lookup(st, cur, db, oid, name)
    it = tr.items.get(key) if key is not None else None
    if it is not None and (it.state == "done" or (
            it.state in ("running", "finishing") and it.worker != b.pid)):
        return _later(st, db) or cur
    return cur


def enter(tr: Tracker, st: VacState, r: int) -> None:
    """Round r runs: every round before it is done."""
    if st.cur is not None and r <= st.cur:
        return
    for rd in st.rounds[:r]:
        for key in rd.keys:
            it = tr.items[key]
            if it.state != "done":
                tr.finish(it, tr.last_wall)
        rd.cursor = len(rd.keys)
    st.cur = r


def _maintained_since(st: VacState, key: str, last: tuple[float | None, float | None],
                      since: float) -> bool:
    """The table's statement of this item ran by hand since `since`: its
    last ANALYZE when the statement analyzes, its last VACUUM when it
    vacuums (a VACUUM (ANALYZE) vacuums first, and ANALYZE leaves
    pg_statistic itself alone)."""
    p = st.parts[key]
    times = ([last[1]] if p.sample > 0 else []) + ([last[0]] if p.heap > 0 else [])
    return any(t is not None and t >= since for t in times)


def _settle_unanalyzable(tr: Tracker, st: VacState, left: list[Item]) -> None:
    """An ANALYZE of pg_statistic does nothing (no statistics say it ran):
    done once every other table of its round is."""
    for it in left:
        r = st.round_of[it.key]
        if it.state != "done" and it.relation in NO_ANALYZE and st.parts[it.key].heap == 0 \
                and all(tr.items[k].state == "done" for k in st.rounds[r].keys if k != it.key):
            tr.finish(it, tr.last_wall)


def settle_from_part(tr: Tracker, st: VacState, part: dict[str, Any] | None) -> None:
    """The tables the statistics show done in the round running now (this
    kind's sample part: those of the connected database vacuumed or
    analyzed by hand since the round's sessions began)."""
    if not part or st.cur is None or part.get("since") is None:
        return
    db, since = part.get("db"), float(part["since"])
    if st.rounds[st.cur].db != db:
        return
    for row in part.get("tables") or ():
        key = st.by_oid.get((st.cur, db, int(row[0])))
        it = tr.items.get(key) if key is not None else None
        if it is not None and it.state == "pending" \
                and _maintained_since(st, it.key, (row[1], row[2]), since):
            tr.finish(it, tr.last_wall)
            handed_out(st, it.key, it.size)


def handed_out(st: VacState, key: str, size: float) -> None:
    """An item of its round seen running or shown done: vacuumdb handed it
    out, and every larger one of the round before it."""
    r = st.round_of.get(key)
    if r is not None and st.parts[key].oid:  # an unplanned table's size is not known
        rd = st.rounds[r]
        rd.floor = size if rd.floor is None else min(rd.floor, size)


def settle_by_order(tr: Tracker, st: VacState) -> None:
    """Tables larger than one known handed out (seen running, or shown done
    by the statistics) were handed out before it: done unless they run
    (ties prove nothing)."""
    if st.cur is None or st.unmapped:
        return
    rd = st.rounds[st.cur]
    if rd.floor is None:
        return
    while rd.cursor < len(rd.keys):
        it = tr.items[rd.keys[rd.cursor]]
        if it.size <= rd.floor:
            break
        if it.state == "pending":
            tr.finish(it, tr.last_wall)
        rd.cursor += 1


def saw(tr: Tracker, st: VacState, server_ts: float | None) -> None:
    """After a sample: when each round's sessions were last seen."""
    live = 0
    for pid in tr.workers:
        s = st.sessions.get(pid)
        if s is not None and server_ts is not None:
            rd = st.rounds[s[1]]
            rd.seen = max(rd.seen or server_ts, server_ts)
            live += s[1] == st.cur
    st.max_sessions = max(st.max_sessions, live)
    st.unmapped = False


def settle_at_end(tr: Tracker, st: VacState, ctx: EndContext) -> bool | None:
    """The tables the statistics show done since their round began, read
    once the process is gone (the last ones ran after the last sample).
    Whether the statistics could be read and show this run at all."""
    left = [it for it in tr.items.values() if it.state != "done"]
    if not left or st.cur is None:
        return None
    cur = st.rounds[st.cur]
    shown = False
    for db in dict.fromkeys(st.parts[it.key].db for it in left):
        done = ctx.catalog_done(db)
        rows = done.get("maintained") if isinstance(done, dict) else None
        if not rows:
            continue
        by_oid = {int(r[0]): (r[2], r[3]) for r in rows if r and r[0] is not None}
        start = min((rd.start for rd in st.rounds if rd.db == db and rd.start is not None),
                    default=cur.start)
        shown |= start is not None and any(
            (t or 0) >= start for pair in by_oid.values() for t in pair)
        for it in left:
            p = st.parts[it.key]
            r = st.round_of[it.key]
            since = st.rounds[r].start if r <= st.cur else cur.seen
            last = by_oid.get(p.oid) if p.db == db and p.oid else None
            if last is not None and since is not None and it.state != "done" \
                    and _maintained_since(st, it.key, last, since):
                tr.finish(it, tr.last_wall)
    if shown:
        _settle_unanalyzable(tr, st, left)
    st.evidence = shown
    return None


def leftover_verdict(st: VacState, left: list[Item]) -> tuple[str, str]:
    names = ", ".join(i.name for i in left[:5]) + (", ..." if len(left) > 5 else "")
    n = f"{len(left)} table(s) not seen processed ({names})"
    unseen = st.cur is None or all(st.round_of.get(i.key, 0) > st.cur for i in left)
    if st.inferred:
        return "ended", (f"vacuumdb's sessions are gone with {n}; its command line (which "
                         "tables, how many stages) could not be read: the work list was a guess")
    if st.opts.missing_stats_only:
        return "ended", (f"vacuumdb's process is gone with {n}: which tables miss statistics "
                         "(--missing-stats-only) pgparmon can only estimate (never analyzed)")
    if st.uncertain and unseen:
        return "ended", (f"vacuumdb's process is gone with {n}: attached during "
                         "--analyze-in-stages, the stage then running could not be seen, and "
                         "those of a later stage may have run before it")
    if not st.evidence:
        return "ended", (f"vacuumdb's process is gone with {n}, and the statistics that say "
                         "which tables it finished (pg_stat_all_tables) do not show this run; "
                         "its exit status is not ours to read (`pgparmon run` sees it)")
    return "failed", (f"vacuumdb ended with {n}: no VACUUM or ANALYZE of them since their "
                      "round began (vacuumdb stops at the first table that fails)")


def stage_words(st: VacState) -> dict[str, Any]:
    """The job's round as the sample says it."""
    if st.cur is None:
        return {"round": None, "rounds": len(st.rounds), "stage": None,
                "current_database": None}
    rd = st.rounds[st.cur]
    return {"round": st.cur + 1, "rounds": len(st.rounds),
            "stage": f"{rd.stage + 1}/3: {STAGE_NAMES[rd.stage]}" if rd.stage is not None
            else None,
            "current_database": rd.db}
