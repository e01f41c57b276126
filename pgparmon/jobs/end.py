"""The end protocol: how a job's end is told and judged.

Its defaults describe no tool: a job of sessions alone works while it has
any, a client process gone early is not taken for a worker that died
(`fixed_workers` False), nothing is settled at the end, and items not
done are a failure. `JobEnd` (job_end.py) reaches a tracked job's driver
through this class alone (`end_of(tracker)`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from ..analyze.items import Item
    from ..analyze.progress import Tracker
    from ..snapshot import Backend, Snapshot
    from .job import Job, StepLook


class EndContext(Protocol):
    """What a driver may consult when a job ends (the Monitor's source)."""

    target_dir: str | None

    def final_files(self) -> Any: ...

    def catalog_done(self, database: str | None = None) -> dict[str, Any]: ...

    def may_ask_again(self, kind: str) -> bool: ...

    def pause(self, seconds: float) -> None: ...

    def next_step(self, job: Job) -> StepLook: ...


class End:
    """How a tool kind's jobs end."""

    # the client's worker processes live until the end (pg_dump, pg_restore):
    # one gone early died; False: processes may come and go (a copy tool's
    # phases, a script's psql per file) and none is taken for dead
    fixed_workers: ClassVar[bool] = False

    def still_working(self, job: Job, members: list[Backend], snap: Snapshot) -> bool:
        """A job with no client process to watch: whether its sessions still
        make it a running job (True while it has any; asked with none too: a
        job the server runs may be working while no session shows)."""
        return bool(members)

    def settle_at_end(self, tr: Tracker, ctx: EndContext, snap: Snapshot) -> bool | None:
        """Last readings before the verdict (items that finished between two
        samples). Returns whether the job's output can be seen by this user
        (None: nothing to say)."""
        return None

    def leftovers(self, tr: Tracker, ctx: EndContext, snap: Snapshot) -> list[Item]:
        """Items still not done when the processes are gone."""
        return tr.unfinished()

    def leftover_verdict(self, tr: Tracker, left: list[Item]) -> tuple[str, str]:
        """(state, reason) of a planned job whose processes are gone with
        items not done and no exit status to read."""
        names = ", ".join(i.name for i in left[:5])
        return "failed", f"the job ended with {len(left)} item(s) not done: {names}"

    def cut_short(self, tr: Tracker, snap: Snapshot) -> str | None:
        """Evidence that the job stopped before its end (its processes are
        gone): what it was doing and how far it got; None: no such evidence."""
        return None

    def exit_reason(self, code: int) -> str:
        return f"exit code {code}"


def end_of(tr: Tracker) -> End:
    """A tracked job's driver, as the end protocol."""
    return tr.driver
