"""Version-banded SQL: each query lives in NAME_VVVVVV.sql, where VVVVVV is
the lowest server_version_num the file works on. `load` picks the newest band
the server can run, in this one place."""

from __future__ import annotations

from functools import cache
from importlib import resources


class NoBandError(LookupError):
    pass


@cache
def _bands(name: str) -> list[tuple[int, str]]:
    out = []
    for entry in resources.files(__package__).iterdir():
        fname = entry.name
        if fname.startswith(name + "_") and fname.endswith(".sql"):
            try:
                out.append((int(fname[len(name) + 1:-4]), fname))
            except ValueError:
                continue
    return sorted(out, reverse=True)


def band(name: str, server_version_num: int) -> int:
    for minimum, _ in _bands(name):
        if server_version_num >= minimum:
            return minimum
    raise NoBandError(f"no {name} query for server version {server_version_num}")


@cache
def load(name: str, server_version_num: int) -> str:
    b = band(name, server_version_num)
    return (resources.files(__package__) / f"{name}_{b}.sql").read_text(encoding="utf-8")
