"""The feed a view pulls published samples from: a live job being followed
(follow.Follower), a recording played back (playback.ReplayFeed), or a test's
list of samples. Views use only this protocol; `FeedBase` gives the defaults
of a feed that cannot seek, show details or be stopped by a signal.

Samples are typed (`sample.Sample`); the summary (pgparmon.summary/1) and
a worker's details are documents."""

from __future__ import annotations

from typing import Any, Protocol

from .sample import Sample

Doc = dict[str, Any]


class Feed(Protocol):
    stop: bool  # set when a signal (SIGTERM, SIGHUP) asks the view to end
    ended: bool  # nothing more will come (a recording ran out before the job ended)
    seekable: bool  # step() and seek() move through the samples (a replay)

    @property
    def outcome(self) -> Any: ...  # job_end.Outcome once the job ended, else None

    @property
    def replay_position(self) -> tuple[int, int] | None: ...  # (sample, of total)

    def tick(self) -> Sample: ...

    def summary(self) -> Doc: ...

    def details(self, pid: int) -> Doc | None: ...  # None: not available from this feed

    def step(self) -> Sample | None: ...

    def seek(self, index: int) -> Sample | None: ...


class FeedBase:
    stop = False
    ended = False
    seekable = False

    @property
    def replay_position(self) -> tuple[int, int] | None:
        return None

    def details(self, pid: int) -> Doc | None:
        return None

    def step(self) -> Sample | None:
        return None

    def seek(self, index: int) -> Sample | None:
        return None
