"""Shared set-up for the benchmarks: a throwaway cluster with a sample DB."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pgparmon.cluster import Cluster, start_cluster  # noqa: E402


def pgparmon(*args: str) -> list[str]:
    return [sys.executable, "-m", "pgparmon", *args]


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def write_json(path: Path, doc: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def machine() -> str:
    return f"{os.cpu_count()} cores, {os.uname().sysname} {os.uname().release}"


__all__ = ["Cluster", "start_cluster", "pgparmon", "timed", "median", "write_json", "machine"]
