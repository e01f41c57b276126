"""`pgparmon demo`: a throwaway cluster, a skewed sample database, a parallel
dump and a parallel restore of it, each followed live and recorded, then
cleanup and a closing word: what ran, how long it took, what limited it,
where the recordings are kept and the commands that look at them again."""

from __future__ import annotations

import os
import shutil
import tempfile

from rich.console import Console

from .cluster import Cluster, ClusterError, start_cluster
from .exitcodes import ExitCode


def sample_sql(scale: float = 1.0, small_tables: int = 20) -> str:
    """One big table, a few medium ones, many small ones, with indexes, keys
    and a foreign key: the skew that makes the end of a parallel run slow."""
    big = max(1000, int(1_500_000 * scale))
    med = max(500, int(200_000 * scale))
    parts = [
        "CREATE TABLE customers (id int PRIMARY KEY, name text, email text, created date);",
        f"INSERT INTO customers SELECT g, 'customer ' || g, md5(g::text) || '@example.com', "
        f"date '2020-01-01' + (g % 1500) FROM generate_series(1, {med}) g;",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int REFERENCES customers(id), "
        "amount numeric(12,2), status text, note text, created timestamptz);",
        f"INSERT INTO orders SELECT g, 1 + g % {med}, (g % 10000) / 7.0, "
        "(ARRAY['new','paid','shipped','returned'])[1 + g % 4], md5(g::text) || md5((g+1)::text), "
        f"timestamptz '2021-01-01' + g * interval '1 second' FROM generate_series(1, {big}) g;",
        "CREATE INDEX orders_customer_idx ON orders (customer_id);",
        "CREATE INDEX orders_created_idx ON orders (created);",
    ]
    for i in range(1, 4):
        n = max(200, int(med * i / 3))
        parts += [
            f"CREATE TABLE events_{i} (id int PRIMARY KEY, kind text, payload text);",
            f"INSERT INTO events_{i} SELECT g, 'kind' || (g % 17), repeat(md5(g::text), 2) "
            f"FROM generate_series(1, {n}) g;",
        ]
    for i in range(1, small_tables + 1):
        parts += [
            f"CREATE TABLE lookup_{i:02d} (code int PRIMARY KEY, label text);",
            f"INSERT INTO lookup_{i:02d} SELECT g, 'label ' || g "
            f"FROM generate_series(1, {50 * i}) g;",
        ]
    parts.append("ANALYZE;")
    return "\n".join(parts)


def create_sample(cl: Cluster, dbname: str, scale: float = 1.0) -> None:
    cl.psql(f"CREATE DATABASE {dbname}")
    cl.psql(sample_sql(scale), dbname=dbname)


def run_demo(jobs: int = 4, scale: float = 1.0, interval: float = 1.0, as_json: bool = False,
             keep: bool = False, record: str | None = None, plain: bool = False) -> int:
    from .launch import run_job

    console = Console(highlight=False, stderr=as_json)
    console.print("[bold]pgparmon demo[/]: starting a throwaway PostgreSQL cluster…")
    try:
        cl = start_cluster(prefix="pgparmon-demo-")
    except ClusterError as exc:
        console.print(f"[red]pgparmon: {exc}[/]")
        return ExitCode.CONNECT
    work = tempfile.mkdtemp(prefix="pgparmon-demo-out-")
    if os.geteuid() == 0:
        shutil.chown(work, "postgres")
    dump_dir = os.path.join(work, "sample.dump")
    # the recordings outlive the demo (pgparmon replay / report read them):
    # --record FILE, else a directory of their own, private as mkdtemp makes it
    rec_dir = None
    if record is None:
        rec_dir = tempfile.mkdtemp(prefix="pgparmon-demo-rec-")
        recs = (os.path.join(rec_dir, "dump.pgparmon.gz"),
                os.path.join(rec_dir, "restore.pgparmon.gz"))
    else:
        recs = (record, _restore_recording(record))
    steps = [(f"pg_dump -Fd -j {jobs} of database 'sample'", recs[0]),
             (f"pg_restore -j {jobs} into database 'restored'", recs[1])]
    ran: list[tuple[str, str, int]] = []
    code = 1
    try:
        console.print(f"cluster on port {cl.port} (socket {cl.sockdir}); creating the sample "
                      "database (one big table, medium and small ones, indexes, keys)…")
        create_sample(cl, "sample", scale)
        env = cl.env()
        console.print(f"\n[bold]1/2[/] {steps[0][0]}:")
        code = run_job([cl.client("pg_dump"), "-Fd", "-j", str(jobs), "-f", dump_dir,
                        "sample"], None, interval, as_json, None, env=env, console=console,
                       record=steps[0][1], plain=plain)
        ran.append((*steps[0], code))
        if code != 0:  # failed, interrupted or hung up: no restore of a bad dump
            return code
        cl.psql("CREATE DATABASE restored")
        console.print(f"\n[bold]2/2[/] {steps[1][0]}:")
        code = run_job([cl.client("pg_restore"), "-j", str(jobs), "-d", "restored", dump_dir],
                       None, interval, as_json, None, env=env, console=console,
                       record=steps[1][1], plain=plain)
        ran.append((*steps[1], code))
        return code
    finally:
        cl.stop(cleanup=not keep)
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
        closing(console, ran, len(steps))
        if rec_dir and not any(os.path.exists(p) for p in recs):
            shutil.rmtree(rec_dir, ignore_errors=True)  # nothing ran: nothing to keep
        if keep:
            console.print(f"kept: cluster files in {cl.base}, dump in {dump_dir}")


def closing(console: Console, ran: list[tuple[str, str, int]], steps: int) -> None:
    """The demo's last word: each job that ran (from its recording: how it
    ended, its time, items and data, what limited it), where the recordings
    are, and how to look at them again. Lines are not wrapped: commands
    and paths stay whole, to copy."""
    from .record import RecordingError, read_recording
    from .sample import SampleError, read_samples
    from .views.summary import end_summary, limits
    from .views.text import summary_head

    console.print(f"\n[bold]pgparmon demo[/]: {len(ran)} of {steps} jobs ran")
    kept = []
    for i, (what, path, code) in enumerate(ran, 1):
        try:
            rec = read_recording(path)
            samples = read_samples(rec.samples)
        except (OSError, RecordingError, SampleError) as exc:
            console.print(f"  {i}/{steps} {what}: exit code {code}; no recording ({exc})",
                          markup=False, soft_wrap=True)
            continue
        kept.append(path)
        es = end_summary(rec.summary, samples)
        console.print(f"  {i}/{steps} ", summary_head(es), sep="", soft_wrap=True)
        if samples:
            console.print(f"      limited by: {limits(samples, 3)}")
    if not kept:
        return
    console.print("recordings (kept):")
    for path in kept:
        console.print(f"  {path}", markup=False, soft_wrap=True)
    console.print("look again (the same screens; a summary and an HTML page):")
    for path in kept:
        console.print(f"  pgparmon replay {path}", markup=False, soft_wrap=True)
    for path in kept:
        name = os.path.basename(path).split(".")[0]
        console.print(f"  pgparmon report {path} --html {name}.html", markup=False,
                      soft_wrap=True)


def _restore_recording(record: str) -> str:
    base = record[:-3] if record.endswith(".gz") else record
    return base + ".restore" + (".gz" if record.endswith(".gz") else "")
