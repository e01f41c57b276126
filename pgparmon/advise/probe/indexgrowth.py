"""What a growing index costs a COPY load (docs/advise.md, "COPY loads").

The COPY probe's steps each load a slice of the file into an emptied
scratch table: its indexes stay small.  A real load fills the table's
indexes as it goes, and each row's insert into a larger btree costs more
(a deeper tree, its pages spread over more memory than the CPU's caches,
more of them split): the load's average rate over the whole file is under
the steps' rate.

The model: a stream's time per file byte when the index holds n file
bytes' worth of entries is  t(n) = a + b * ln(n + FLOOR)  (a btree's
descent grows with the log of its size).  Two one-stream measurements fix
a and b: the probe's one-stream step (into the empty table: n from 0 to
what it loaded) and its grown step (into the table still holding what the
last step loaded, `GrownStep`).  Over a load of D bytes into a table that
holds E bytes' worth already, the time per byte is t's mean over [E, E + D]
(`mean_log`); every step's rate is scaled by the one-stream step's mean
over [0, its bytes] against the load's (`growth_scale`), never up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .results import ProbePoint, ProbeResult

# Below about this many file bytes of entries an index costs its inserts
# nothing more as it grows (it fits the CPU caches); ln's origin moved here
# keeps t finite at an empty table.
FLOOR = 1e6
# The grown step's mean log size must exceed the one-stream step's by at
# least this much (a shorter lever measures noise, not a slope).  A step
# from empty to B has a mean log about ln(B) - 1: a grown step after as
# much again as the step loaded clears it.
MIN_LEVER = 1.0
# The probe runs the grown step when its lever, at as many bytes as the
# one-stream step loaded, clears MIN_LEVER; on a busy host the step loads
# less in its time and its lever falls short of that, so the model takes a
# step that ran with half of it: a step run, its rate noted, then dropped
# from the advice as "not measured" said two things at once.
MODEL_MIN_LEVER = MIN_LEVER / 2


def lever(first_bytes: float, before_bytes: float, grown_bytes: float) -> float:
    """The grown step's mean log size less the one-stream step's."""
    return mean_log(before_bytes, before_bytes + grown_bytes) - mean_log(0.0, first_bytes)


def mean_log(n0: float, n1: float) -> float:
    """The mean of ln(n + FLOOR) over n in [n0, n1] (n0 <= n1, both >= 0)."""
    n0, n1 = max(0.0, n0), max(0.0, n1)
    if n1 - n0 < 1.0:
        return math.log(n0 + FLOOR)

    def g(n: float) -> float:  # an antiderivative of ln(n + FLOOR)
        x = n + FLOOR
        return x * math.log(x) - x

    return (g(n1) - g(n0)) / (n1 - n0)


@dataclass(frozen=True)
class GrowthModel:
    """t(n) = a + b * ln(n + FLOOR): a stream's seconds per file byte with
    n file bytes' worth of entries in the table's indexes."""

    a: float
    b: float

    def mean_cost(self, n0: float, n1: float) -> float:
        """Seconds per byte over a load that takes the index from n0 to n1."""
        return self.a + self.b * mean_log(n0, n1)


def growth_model(first: ProbePoint, grown_point: ProbePoint, before_bytes: float
                 ) -> GrowthModel | None:
    """a and b from the one-stream step into the empty table (`first`: its
    bytes from 0 on) and the one into the grown one (`grown_point`, after
    before_bytes); b at least 0 (a grown index never makes inserts
    cheaper: a faster grown step is noise).  None when a rate is missing or
    the lever (`lever`) is under MODEL_MIN_LEVER."""
    if first.bytes_per_s <= 0 or grown_point.bytes_per_s <= 0 or first.heap_bytes <= 0:
        return None
    if lever(first.heap_bytes, before_bytes, grown_point.heap_bytes) < MODEL_MIN_LEVER:
        return None
    l1 = mean_log(0.0, first.heap_bytes)
    l2 = mean_log(before_bytes, before_bytes + grown_point.heap_bytes)
    t1, t2 = 1.0 / first.bytes_per_s, 1.0 / grown_point.bytes_per_s
    b = max(0.0, (t2 - t1) / (l2 - l1))
    return GrowthModel(t1 - b * l1, b)


def model_of(res: ProbeResult) -> GrowthModel | None:
    """The probe's growth model; None without a grown step (no index, or
    the budget or the steps' loads too small for it)."""
    one = res.point(1)
    if res.grown is None or one is None:
        return None
    return growth_model(one, res.grown.point, res.grown.before_bytes)


def growth_scale(model: GrowthModel, step_bytes: float, load_bytes: float,
                 existing_bytes: float = 0.0) -> float:
    """What a step's rate (it loaded step_bytes into an empty table) is
    multiplied by for a load of load_bytes into a table holding
    existing_bytes' worth already: t's mean over the step's range against
    its mean over the load's; at most 1."""
    t_step = model.mean_cost(0.0, step_bytes)
    t_load = model.mean_cost(existing_bytes, existing_bytes + load_bytes)
    if t_step <= 0 or t_load <= 0:
        return 1.0
    return min(1.0, t_step / t_load)


def as_grown(res: ProbeResult, model: GrowthModel | None, load_bytes: float,
             existing_bytes: float = 0.0) -> ProbeResult:
    """The probe's steps as a load of load_bytes (into a table holding
    existing_bytes' worth of rows) runs them over its indexes' growth:
    every step's time divided by the one-stream step's `growth_scale` under
    `model` (`model_of` the probe as measured: res may be its steps
    already converted, as_logged's), and its backends' CPU time with it
    (the inserts' extra cost is theirs).  One scale for all counts: a step
    of k streams loaded more and paid a little more of the growth, but
    scaling each by its own bytes changes the curve's shape by a few per
    cent that the fit then carries out to many streams (a load at 8 streams
    predicted faster than without the growth); the one scale keeps the
    shape as measured, and errs, if at all, slow at many streams.  res as
    it is without a model."""
    one = res.point(1)
    if model is None or load_bytes <= 0 or one is None:
        return res
    s = growth_scale(model, one.heap_bytes, load_bytes, existing_bytes)
    if s >= 1.0:
        return res

    return res.slowed(s, 1.0 / s)


def load_scale(res: ProbeResult, load_bytes: float, existing_bytes: float = 0.0) -> float | None:
    """The one-stream step's rate scale for the load (for the advice's
    notes); None without a growth model."""
    m, one = model_of(res), res.point(1)
    if m is None or one is None:
        return None
    return growth_scale(m, one.heap_bytes, load_bytes, existing_bytes)
