"""A job's notes: what the sample says once and keeps (a missing view, a
missing privilege, an unreadable process, a failed statement).

Each note is said the first time it comes up and kept in the order said;
the same text again adds nothing. The notes that come from the server's
facts, the job's client processes and its sessions are worded here; the
other modules hand their text to `Notes.say`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .analyze.warnings import CHECKSUMS_NOTE
from .jobs.statements import copy_target

if TYPE_CHECKING:
    from .analyze.progress import Tracker
    from .jobs.base import Job
    from .readers.db import ServerFacts
    from .snapshot import Snapshot


class Notes:
    """The notes said so far, each once, in order."""

    def __init__(self) -> None:
        self.said: list[str] = []
        self._seen: set[str] = set()
        self._aborted: set[int] = set()  # sessions said to have failed a statement

    def say(self, msg: str) -> None:
        if msg not in self._seen:
            self._seen.add(msg)
            self.said.append(msg)

    def __len__(self) -> int:
        return len(self.said)

    # ---- the notes worded here ------------------------------------------

    def server(self, facts: ServerFacts) -> None:
        """What the monitor's role and the server's version leave unseen."""
        for v in facts.missing_views():
            self.say(f"server {facts.version} has no {v}: progress from that view "
                     "is not available; activity and host rates still work")
        if not facts.read_all_stats and not facts.is_superuser:
            self.say(f"role {facts.user} lacks pg_read_all_stats: other roles' backends "
                     "show no details (GRANT pg_monitor TO "
                     f"{facts.user} shows them)")

    def discovered(self, job: Job, facts: ServerFacts, why: str | None,
                   data_flow: str | None) -> None:
        """How the job is followed (host only), and what a load pays for
        the server's data checksums."""
        if facts.host_only:
            self.say((why + ": " if why else "") + "host only, no database connection "
                     f"({job.kind} runs with the server down): followed from its processes "
                     "and files on this host")
        if data_flow == "in" and facts.settings.get("data_checksums") == "on":
            self.say(CHECKSUMS_NOTE)

    def unreadable_clients(self, snap: Snapshot) -> None:
        unreadable = [c.pid for c in snap.clients if c.open_files is None]
        if unreadable:
            self.say(f"cannot read the open files of client process {unreadable[0]} (another "
                     "user's process): progress from the server's views only; run pgparmon "
                     "as the job's OS user or root for exact restore progress")

    def aborted(self, tr: Tracker, snap: Snapshot) -> None:
        """A session of the job whose transaction failed (the server rejected
        a statement: a COPY's bad input line, a constraint): said once per
        session. The error's text is not in any view (attach sees the state;
        `run` reads the job's own output)."""
        for b in tr.members(snap):
            if b.state != "idle in transaction (aborted)" or b.pid in self._aborted:
                continue
            self._aborted.add(b.pid)
            ct = copy_target(b.query)
            what = (f"its COPY {'into' if ct[0] == 'from' else 'from'} {ct[1]}" if ct
                    else f"its last statement ({(b.query or '?').split()[0]})")
            self.say(f"session {b.pid} of the job: {what} failed and its transaction is "
                     "aborted (the server's error text is in the server log and the "
                     "client's output; `pgparmon run` shows it)")
