"""The restore of an archive with early foreign keys: three steps or four.

pg_restore -j can add a foreign key on a partitioned table before its
partitions' data; the advice restores such an archive in three steps
(pre-data; data with -j; post-data with -j), and every key then comes
after all the data. At -j 2 a key's check can still start before most of
the referencing partitions' keys are built (the post-data step reaches the
tables one at a time), and without an index on its columns the check sorts
every partition (bench/fk_check_order.py: 1.5x slower). A fourth step would
keep the keys for last: the post-data but the foreign keys (`-L`, a list
from `pg_restore -l` without the FK CONSTRAINT lines), then the keys (`-L`,
those lines). This times both on partitioned-fk (bench/advise_accuracy.py's
shape, where every foreign key is such a key) at -j 2, 3 and 4, in
alternating order, and prints the medians.

    .venv/bin/python bench/restore_fk_last.py              # ~2 min on 2 cores
    .venv/bin/python bench/restore_fk_last.py --repeats 5

Raw results: docs/bench/restore_fk_last.json.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import advise_accuracy as shapes
from common import machine, median, server_tmpdir, start_cluster, write_json

REPO = Path(__file__).resolve().parent.parent
WAYS = ("three", "four")


def lists(cl: Any, archive: Path) -> tuple[Path, Path]:
    """Two list files: every item but the foreign keys; the foreign keys."""
    listing = subprocess.run([cl.client("pg_restore"), "-l", str(archive)], env=cl.env(),
                             capture_output=True, text=True, check=True).stdout.splitlines()
    out = archive.parent / "rest.list", archive.parent / "fk.list"
    out[0].write_text("".join(f"{ln}\n" for ln in listing if " FK CONSTRAINT " not in ln))
    out[1].write_text("".join(f"{ln}\n" for ln in listing if " FK CONSTRAINT " in ln))
    return out


def restore(cl: Any, archive: Path, j: int, files: tuple[Path, Path], way: str
            ) -> list[float]:
    """Seconds of each step of one restore into a fresh database."""
    cl.psql("DROP DATABASE IF EXISTS fk_last")
    cl.psql("CREATE DATABASE fk_last")
    pr, jj, tail = cl.client("pg_restore"), ["-j", str(j)], ["-d", "fk_last", str(archive)]
    cmds = [[pr, "--section=pre-data", *tail], [pr, *jj, "--section=data", *tail]]
    if way == "three":
        cmds.append([pr, *jj, "--section=post-data", *tail])
    else:
        cmds += [[pr, *jj, "--section=post-data", "-L", str(files[0]), *tail],
                 [pr, *jj, "-L", str(files[1]), *tail]]
    out = []
    for cmd in cmds:
        t0 = time.perf_counter()
        subprocess.run(cmd, env=cl.env(), check=True)
        out.append(time.perf_counter() - t0)
    cl.psql("DROP DATABASE fk_last")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--jobs", default="2,3,4")
    ap.add_argument("--scale", type=float, default=1.0, help="partitioned-fk's data factor")
    ap.add_argument("--out", default=str(REPO / "docs" / "bench" / "restore_fk_last.json"))
    a = ap.parse_args()
    jobs = [int(x) for x in a.jobs.split(",")]
    cl = start_cluster(prefix="pgparmon-fklast-")
    work = server_tmpdir("pgparmon-fklast-")
    try:
        info, archive = shapes.shape_archive(cl, "partitioned-fk", a.scale, work)
        assert shapes.in_sections(archive), "the shape's archive has no early foreign key"
        files = lists(cl, archive)
        runs: list[dict[str, Any]] = []
        for r in range(a.repeats):
            for j in jobs:
                for way in (WAYS if (r + j) % 2 == 0 else WAYS[::-1]):
                    steps = restore(cl, archive, j, files, way)
                    runs.append({"repeat": r, "jobs": j, "way": way,
                                 "wall_s": round(sum(steps), 3),
                                 "steps_s": [round(s, 3) for s in steps]})
                    print(f"  -j {j} {way:5s} {sum(steps):6.3f} s  steps "
                          + " ".join(f"{s:.3f}" for s in steps), flush=True)
    finally:
        cl.stop()
        shutil.rmtree(work, ignore_errors=True)
    med = {str(j): {w: round(median([x["wall_s"] for x in runs
                                     if x["jobs"] == j and x["way"] == w]), 3) for w in WAYS}
           for j in jobs}
    for j, m in med.items():
        print(f"-j {j}: three steps {m['three']:.3f} s, four steps {m['four']:.3f} s "
              f"({m['three'] / m['four']:.2f}x), median of {a.repeats}")
    write_json(Path(a.out), {"benchmark": "restore_fk_last", "machine": machine(),
                             "started": datetime.now(UTC).isoformat(timespec="seconds"),
                             "settings": {"repeats": a.repeats, "jobs": jobs, "scale": a.scale},
                             "database": info, "runs": runs, "median_s": med})


if __name__ == "__main__":
    main()
