"""`pgparmon demo`: a throwaway cluster, a skewed sample database, a parallel
dump and a parallel restore of it, each followed live, then cleanup."""

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
    code = 1
    try:
        console.print(f"cluster on port {cl.port} (socket {cl.sockdir}); creating the sample "
                      "database (one big table, medium and small ones, indexes, keys)…")
        create_sample(cl, "sample", scale)
        env = cl.env()
        console.print(f"\n[bold]1/2[/] pg_dump -Fd -j {jobs} of database 'sample':")
        code = run_job([cl.client("pg_dump"), "-Fd", "-j", str(jobs), "-f", dump_dir,
                        "sample"], None, interval, as_json, None, env=env, console=console,
                       record=record, plain=plain)
        if code != 0:  # failed, interrupted or hung up: no restore of a bad dump
            return code
        cl.psql("CREATE DATABASE restored")
        console.print(f"\n[bold]2/2[/] pg_restore -j {jobs} into database 'restored':")
        code = run_job([cl.client("pg_restore"), "-j", str(jobs), "-d", "restored", dump_dir],
                       None, interval, as_json, None, env=env, console=console,
                       record=_restore_recording(record), plain=plain)
        return code
    finally:
        cl.stop(cleanup=not keep)
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            console.print(f"kept: cluster files in {cl.base}, dump in {dump_dir}")


def _restore_recording(record: str | None) -> str | None:
    if not record:
        return None
    base = record[:-3] if record.endswith(".gz") else record
    return base + ".restore" + (".gz" if record.endswith(".gz") else "")
