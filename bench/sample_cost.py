"""What building one published sample costs, on recorded streams: the
part of every tick that makes the sample (`SampleBuilder.build`), and what
its document costs at the edge (`to_json()` where samples are typed, then
`json.dumps` as `--json` and the recording write it).

Each recording (default: every golden recording in tests/golden/) is
replayed through the real Monitor from its ReplaySource (no server, no
sleeping); the builder's calls are timed with perf_counter around them,
and so is the whole tick. A pass replays every recording once; the figure
of a pass is its mean per sample; a run is PASSES passes and reports their
medians. With --compare TREE the same is measured for another checkout
(e.g. `git archive main | tar -x -C /tmp/main`), in pairs of fresh
processes, A (this tree) and B (TREE) in turns, the order swapped each
pair: on a shared, noisy machine only figures taken side by side compare.
Both trees must replay the recordings to the same documents (checked).

    .venv/bin/python bench/sample_cost.py                          # ~10 s
    .venv/bin/python bench/sample_cost.py --compare /tmp/main --label "main 3b4eff7"

Raw results: docs/bench/sample_cost.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PY = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv/bin/python").exists() \
    else sys.executable


def measure(recordings: list[str], passes: int) -> dict[str, Any]:
    """In this process (whichever tree `pgparmon` is imported from)."""
    from pgparmon.monitor import Monitor
    from pgparmon.record import read_recording
    from pgparmon.replay_source import EndOfRecording, ReplaySource
    from pgparmon.sample_doc import SampleBuilder

    recs = [read_recording(p) for p in recordings]
    build = SampleBuilder.build
    spent = {"build": 0.0}

    def timed(self: Any, t: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return build(self, t)
        finally:
            spent["build"] += time.perf_counter() - t0

    SampleBuilder.build = timed  # type: ignore[method-assign]
    rows: list[dict[str, float]] = []
    digest = ""
    for _ in range(passes):
        n, tick_s, doc_s, line_s = 0, 0.0, 0.0, 0.0
        spent["build"] = 0.0
        h = hashlib.sha256()
        for rec in recs:
            mon = Monitor(ReplaySource(rec.header, rec.events))
            mon.discover()
            while mon.outcome is None:
                t0 = time.perf_counter()
                try:
                    s = mon.tick()
                except EndOfRecording:
                    break
                t1 = time.perf_counter()
                doc = s.to_json() if hasattr(s, "to_json") else s
                t2 = time.perf_counter()
                line = json.dumps(doc, separators=(",", ":"))
                t3 = time.perf_counter()
                tick_s, doc_s, line_s, n = tick_s + t1 - t0, doc_s + t2 - t1, line_s + t3 - t2, n + 1
                h.update(line.encode())
        digest = h.hexdigest()
        rows.append({"tick_us": 1e6 * tick_s / n, "build_us": 1e6 * spent["build"] / n,
                     "to_json_us": 1e6 * doc_s / n, "dumps_us": 1e6 * line_s / n,
                     "samples": n})
    out: dict[str, Any] = {k: statistics.median(r[k] for r in rows)
                           for k in ("tick_us", "build_us", "to_json_us", "dumps_us")}
    out["build_and_document_us"] = statistics.median(r["build_us"] + r["to_json_us"]
                                                     for r in rows)
    out["samples"] = rows[0]["samples"]
    out["documents_sha256"] = digest
    return out


def run_side(tree: Path, recordings: list[str], passes: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    res = subprocess.run([PY, str(Path(__file__).resolve()), "--worker", "--passes",
                          str(passes), *recordings], cwd=str(tree), env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(res.stdout)  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("recordings", nargs="*")
    ap.add_argument("--passes", type=int, default=15)
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--compare", type=Path, default=None, metavar="TREE")
    ap.add_argument("--label", default=None, help="what TREE is, for the results "
                    "(default: its directory's name)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(REPO / "docs" / "bench" / "sample_cost.json"))
    a = ap.parse_args()
    recs = a.recordings or sorted(str(p) for p in (REPO / "tests" / "golden").glob("*/*.rec.gz"))
    if a.worker:
        print(json.dumps(measure(recs, a.passes)))
        return
    sys.path.insert(0, str(REPO / "bench"))
    from common import machine, write_json

    doc: dict[str, Any] = {"machine": machine(), "recordings": [os.path.relpath(r, REPO)
                                                                for r in recs],
                           "passes": a.passes}
    if a.compare is None:
        doc["A"] = run_side(REPO, recs, a.passes)
    else:
        pairs = []
        for i in range(a.pairs):
            order = ("A", "B") if i % 2 == 0 else ("B", "A")
            got = {side: run_side(REPO if side == "A" else a.compare.resolve(), recs, a.passes)
                   for side in order}
            pairs.append(got)
            print(f"pair {i + 1}: A build+doc {got['A']['build_and_document_us']:.1f} us, "
                  f"B {got['B']['build_and_document_us']:.1f} us", file=sys.stderr)
        same = {p[s]["documents_sha256"] for p in pairs for s in "AB"}
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=False).stdout.strip()
        doc["compare"] = {"A": f"this tree ({head or '?'})",
                          "B": a.label or a.compare.resolve().name, "pairs": pairs,
                          "same_documents": len(same) == 1}
        for key in ("tick_us", "build_us", "to_json_us", "dumps_us", "build_and_document_us"):
            for side in "AB":
                doc["compare"][f"{side}_{key}"] = statistics.median(p[side][key] for p in pairs)
            doc["compare"][f"ratio_{key}"] = statistics.median(
                p["A"][key] / p["B"][key] for p in pairs if p["B"][key] > 0) \
                if any(p["B"][key] > 0 for p in pairs) else None
    write_json(Path(a.out), doc)
    print(json.dumps({k: v for k, v in doc.get("compare", doc).items() if k != "pairs"},
                     indent=1))


if __name__ == "__main__":
    main()
