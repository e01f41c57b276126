"""How every view writes a number: the one place for units.

The convention (README.md, "Units", says the same):

- sizes in SI units, base 1000: B, kB, MB, GB, TB ("850 B", "14.2 MB"),
  never KiB/MiB and never 1024-based numbers labelled kB/MB;
- rates are a size per second ("12.3 MB/s");
- durations: under a second in milliseconds ("850 ms"), under a minute in
  seconds with one decimal ("4.2 s", "42.0 s"), under an hour in minutes and
  seconds ("3 min 05 s"), above in hours and minutes ("2 h 03 min");
- counts (rows, rows/s) with SI prefixes, base 1000 ("12.3k", "4.5M"), or
  whole with thousands separators where the exact number matters
  ("1,234,567").

A missing value (None) is "-" everywhere.
"""

from __future__ import annotations

SIZE_UNITS = ("B", "kB", "MB", "GB", "TB")


def size(n: float | None) -> str:
    """Bytes in SI units: "850 B", "14.2 MB"."""
    if n is None:
        return "-"
    x = float(n)
    i = 0
    while abs(x) >= (999.5 if i == 0 else 999.95) and i < len(SIZE_UNITS) - 1:
        x /= 1000
        i += 1
    return f"{x:.0f} {SIZE_UNITS[i]}" if i == 0 else f"{x:.1f} {SIZE_UNITS[i]}"


def rate(n: float | None) -> str:
    """Bytes per second: "12.3 MB/s"."""
    return "-" if n is None else size(n) + "/s"


def duration(s: float | None) -> str:
    """Seconds: "850 ms", "4.2 s", "3 min 05 s", "2 h 03 min"."""
    if s is None:
        return "-"
    s = max(0.0, float(s))
    if s < 0.9995:
        return f"{s * 1000:.0f} ms"
    if s < 59.95:
        return f"{s:.1f} s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m} min {sec:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


def eta(s: float | None, why: str | None) -> str:
    """A published job's ETA (`job.eta_s`, `job.eta_reason`): its duration;
    "≥ " before it when the ETA leaves a part out and says which (a reason
    beside the seconds: a backup waiting before its copy counts the wait
    only); without one, why."""
    if s is None:
        return str(why or "?")
    return ("≥ " if why else "") + duration(float(s))


def period(a: float | None, b: float | None) -> str:
    """A stretch of time, as `duration` at both ends, its unit said once
    when both ends share it: "13.0–14.0 s", "850 ms–1.8 s"."""
    x, y = duration(a), duration(b)
    xn, _, xu = x.partition(" ")
    yn, _, yu = y.partition(" ")
    if xu == yu and " " not in xu:
        return f"{xn}–{y}"
    return f"{x}–{y}"


def about(s: float | None) -> str:
    """A measured period to two significant digits, as `duration`: the
    median gap of samples taken every second (0.997 s) reads "1.0 s"."""
    return "-" if s is None else duration(float(f"{float(s):.2g}"))


def count(n: float | None) -> str:
    """A count with an SI prefix: "950", "12.3k", "4.5M"."""
    if n is None:
        return "-"
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.1f}{unit}"
    return f"{n:.0f}"


def count_exact(n: float | None) -> str:
    """A count in full: "1,234,567"."""
    return "-" if n is None else f"{n:,.0f}"
