"""`pgparmon exporter`: the collector's names and cardinality (no server),
retention, the Prometheus rules (promtool), and the exporter against real
pg_dump jobs scraped by a real Prometheus."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import socket
import ssl
import stat
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
from conftest import _debian_tool
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST
from prometheus_client.openmetrics.exposition import generate_latest as om_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from support import (
    dump_held_at_start,
    pgparmon_cmd,
    restore_in_steps,
    table_lock_held,
    wait_until,
)

from pgparmon.cluster import Cluster, free_port
from pgparmon.connect import ConnTarget
from pgparmon.exporter import retention
from pgparmon.exporter.collector import (
    STATES,
    ExporterCollector,
    JobView,
    ServerView,
    State,
    families,
    pick_jobs,
)
from pgparmon.exporter.daemon import Exporter, Options, SafeRecorder, server_name, targets
from pgparmon.record import Recorder, read_recording
from pgparmon.jobs.registry import all_phases, all_verdicts, all_warnings, drivers
from pgparmon.sample import Sample

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "contrib" / "prometheus" / "pgparmon.rules.yml"
RULE_TESTS = ROOT / "contrib" / "prometheus" / "pgparmon.rules.test.yml"
ALLOWED_LABELS = {"server", "database", "kind", "tool", "state", "phase", "bottleneck", "code"}


# ---- the collector, without a server --------------------------------------------

def _doc(state: str = "running", bottleneck: str = "client-cpu",
         warnings: tuple[str, ...] = ()) -> Sample:
    return Sample.from_json({
        "schema": "pgparmon.sample/1", "ts": "2026-11-26T01:00:00.000+00:00",
        "job": {"kind": "pg_dump", "state": state, "client_pid": 48213, "jobs": 4,
                "progress": 0.42, "eta_s": 310.5, "bytes_per_s": 52e6, "items_total": 13,
                "items_done": 5, "target": "/backup/sales-20261126"},
        "workers": [
            {"pid": 48217, "phase": "copy", "relation": "public.orders", "item": "orders"},
            {"pid": 48218, "phase": "copy", "relation": "public.lines", "item": "lines"},
            {"pid": 48219, "phase": "lock-wait", "relation": "public.audit", "item": "audit"},
        ],
        "bottleneck": {"kind": bottleneck, "detail": "pg_dump workers at 98% of a core"},
        "warnings": [{"code": c, "message": "..."} for c in warnings],
        "free_bytes": 123456789,
        "host": {"cpu_percent": 87.5, "iowait_percent": 4.0, "per_cpu": [80.0, 95.0]},
    })


def _job(**kw: Any) -> JobView:
    base: dict[str, Any] = dict(server="db1:5432/postgres", database="sales", kind="pg_dump",
                                tool="pg_dump", doc=_doc(), started=1795650000.0,
                                bytes_done=7.5e9, rows_done=1.2e7, last_progress=1795650300.0)
    base.update(kw)
    return JobView(**base)


def _exposition(st: State) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ExporterCollector(lambda: st))
    return om_latest(reg).decode()


def _parsed(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_collector_names_units_and_no_pid_or_table_labels() -> None:
    st = State(servers=(ServerView("db1:5432/postgres", up=True, last_sample=1795650301.0,
                                   sample_seconds=0.004, errors=2, jobs=1),),
               jobs=(_job(doc=_doc(warnings=("disk-full-soon",))),),
               last_success={("db1:5432/postgres", "sales", "pg_dump"): 1795600000.0},
               started=1795640000.0, recordings_dir="/var/lib/pgparmon/rec",
               recordings_bytes=4096, recordings_files=1)
    text = _exposition(st)
    fams = _parsed(text)  # the OpenMetrics parser accepts it (it raises otherwise)
    assert text.rstrip().endswith("# EOF")
    for name, fam in fams.items():
        assert name.startswith("pgparmon_"), name
        if fam.unit:
            assert name.endswith("_" + fam.unit), (name, fam.unit)
        if fam.type != "counter":
            assert not name.endswith("_total"), name
        for s in fam.samples:
            assert set(s.labels) <= ALLOWED_LABELS, (s.name, s.labels)
            for v in s.labels.values():
                # no pid, table, path or time as a label value
                assert not any(x in v for x in ("4821", "orders", "lines", "audit", "/backup",
                                                "2026", "1795")), (s.name, s.labels)
    counters = {n for n, f in fams.items() if f.type == "counter"}
    assert {"pgparmon_job_bytes", "pgparmon_job_rows", "pgparmon_exporter_errors"} <= counters
    assert any(s.name == "pgparmon_job_bytes_total" and s.value == 7.5e9
               for s in fams["pgparmon_job_bytes"].samples)
    # one-hot families: exactly one 1 per job, over the fixed lists
    states = {s.labels["state"]: s.value for s in fams["pgparmon_job_state"].samples}
    assert states == {s: (1.0 if s == "running" else 0.0) for s in STATES}
    necks = {s.labels["bottleneck"]: s.value for s in fams["pgparmon_job_bottleneck"].samples}
    assert set(necks) == set(all_verdicts()) and necks["client-cpu"] == 1.0 and sum(
        necks.values()) == 1.0
    warns = {s.labels["code"]: s.value for s in fams["pgparmon_job_warning"].samples}
    assert set(warns) == set(all_warnings())
    assert warns["disk-full-soon"] == 1.0 and sum(warns.values()) == 1.0
    phases = {s.labels["phase"]: s.value for s in fams["pgparmon_job_active_workers"].samples}
    assert phases["copy"] == 2.0 and phases["lock-wait"] == 1.0 and sum(phases.values()) == 3
    # a series for every registered phase, the drivers' among them (a
    # pgBackRest restore's rows: restore, then finishing)
    assert set(phases) == {p.name for p in all_phases()} and {"restore", "finishing"} <= set(phases)
    single = {n: f.samples[0].value for n, f in fams.items() if len(f.samples) == 1}
    assert single["pgparmon_job_progress_ratio"] == 0.42
    assert single["pgparmon_job_eta_seconds"] == 310.5
    assert single["pgparmon_job_start_time_seconds"] == 1795650000.0
    assert single["pgparmon_last_success_time_seconds"] == 1795600000.0
    assert single["pgparmon_exporter_recordings_bytes"] == 4096
    assert single["pgparmon_host_cpu_ratio"] == 0.875
    assert single["pgparmon_host_iowait_ratio"] == 0.04
    assert "pgparmon_job_end_time_seconds" not in single  # still running


def test_every_registered_verdict_and_warning_has_a_series_before_it_happens() -> None:
    """The one-hot values come from the registries the core and the drivers
    fill (pgparmon.verdicts), none listed in the exporter: a job whose
    verdict is the judge's has a series at 0 for each driver's own verdict
    kind (a sync's worker-slots and sync-failing, a backup's checkpoint)
    and for every warning code, its own at 1."""
    fams = _parsed(_exposition(State(jobs=(_job(doc=_doc(warnings=("checkpoints",))),))))
    necks = {s.labels["bottleneck"]: s.value for s in fams["pgparmon_job_bottleneck"].samples}
    for d in drivers():
        for kind in d.verdicts:
            assert necks.get(kind) == (1.0 if kind == "client-cpu" else 0.0), (d.kind, kind)
    assert {"worker-slots", "sync-failing", "checkpoint", "archiving"} <= set(necks)
    assert necks["client-cpu"] == 1.0 and sum(necks.values()) == 1.0
    warns = {s.labels["code"]: s.value for s in fams["pgparmon_job_warning"].samples}
    assert {"fk-before-partitions", "archive-failing", "slot-lost", "slot-retains-wal"} <= set(
        warns)
    assert warns == {c: (1.0 if c == "checkpoints" else 0.0) for c in all_warnings()}
    # docs/metrics.md lists every value of each family
    doc = (ROOT / "docs" / "metrics.md").read_text()
    for family, values in (("pgparmon_job_bottleneck", all_verdicts()),
                           ("pgparmon_job_warning", all_warnings()),
                           ("pgparmon_job_active_workers", [p.name for p in all_phases()])):
        row = re.search(rf"^\| `{family}` \| gauge .*$", doc, re.MULTILINE)
        assert row is not None, family
        assert not [v for v in values if f"`{v}`" not in row.group(0)], family
    # a value a sample holds that no one registered (a recording of another
    # version) is shown, not dropped
    odd = _parsed(_exposition(State(jobs=(_job(doc=_doc(bottleneck="no-such-kind")),))))
    assert {s.labels["bottleneck"]: s.value for s in odd["pgparmon_job_bottleneck"].samples
            if s.value} == {"no-such-kind": 1.0}


def test_one_series_per_label_set_and_an_ended_job_has_no_bottleneck() -> None:
    old = _job(doc=_doc(state="failed"), started=1795640000.0, ended=1795641000.0)
    new = _job(started=1795650000.0)
    assert pick_jobs([new, old]) == [new]
    fams = _parsed(_exposition(State(jobs=(old, new))))
    assert len(fams["pgparmon_job_info"].samples) == 1
    ended = _parsed(_exposition(State(jobs=(old,))))
    assert {s.labels["state"] for s in ended["pgparmon_job_state"].samples
            if s.value == 1} == {"failed"}
    assert sum(s.value for s in ended["pgparmon_job_bottleneck"].samples) == 0
    assert ended["pgparmon_job_end_time_seconds"].samples[0].value == 1795641000.0
    # no job at all: the exporter's own series only, still a valid exposition
    bare = _parsed(_exposition(State(started=1.0)))
    assert not bare["pgparmon_job_info"].samples
    assert bare["pgparmon_exporter_start_time_seconds"].samples[0].value == 1.0
    assert len(families(State())) == len(families(State(jobs=(new,))))


def test_server_label_is_redacted_and_stable() -> None:
    secret = "s3cr3t-pass"
    for t, want in [
        (ConnTarget(dbname=f"host=db1 port=5433 dbname=sales password={secret}"),
         "db1:5433/sales"),
        (ConnTarget(dbname=f"postgresql://u:{secret}@db2:6432/hr"), "db2:6432/hr"),
        (ConnTarget(host="/var/run/postgresql", port=5432, dbname="postgres"),
         "local:5432/postgres"),
    ]:
        name = server_name(t)
        assert name == want and secret not in name
        assert server_name(t) == name
    with pytest.raises(ValueError):
        server_name(ConnTarget(dbname="host='unterminated"))


def test_a_recording_on_a_full_disk_stops_itself_and_counts(tmp_path: Path) -> None:
    errors: list[int] = []
    rec = SafeRecorder("/dev/full", lambda: errors.append(1))
    rec.header({"job": {}})
    rec.event("sample", {"x": 1})
    rec.close()
    assert errors == [1] and rec.rec is None
    bad = SafeRecorder(str(tmp_path / "missing" / "x.pgparmon.gz"), lambda: errors.append(2))
    bad.event("sample", {})
    assert errors == [1, 2]


def test_a_recorder_that_cannot_write_still_closes_its_file() -> None:
    # a full disk fails the write and the close alike: the file is closed all
    # the same (an exporter that runs for months leaks no descriptor a job)
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    rec = Recorder("/dev/full")
    with pytest.raises(OSError):
        # more than the file's buffer after compression: the gzip trailer
        # at close needs the disk too
        rec.event("sample", {"x": base64.b64encode(os.urandom(100_000)).decode()})
    with pytest.raises(OSError):
        rec.close()
    assert open_fds() == before
    safe = SafeRecorder("/dev/full", lambda: None)
    safe.event("sample", {"x": 1})
    safe.close()
    assert safe.rec is None and open_fds() == before


def test_retention_deletes_oldest_finished_never_open_or_newest(tmp_path: Path) -> None:
    now = time.time()
    paths = []
    for i in range(5):  # 10 kB each, a day apart, oldest first
        p = tmp_path / retention.recording_name(now - (5 - i) * 86400, "db1", "pg_dump",
                                                "sales", 100 + i)
        p.write_bytes(b"x" * 10_000)
        os.utime(p, (now - (5 - i) * 86400,) * 2)
        paths.append(p)
    (tmp_path / "notes.txt").write_bytes(b"y" * 50_000)  # not ours: never counted or deleted
    open_now = {str(paths[0].resolve())}  # the oldest is still being written
    deleted, failed = retention.prune(str(tmp_path), None, 25_000, open_now, now=now)
    assert (deleted, failed) == (3, 0)
    assert sorted(p.exists() for p in paths) == [False, False, False, True, True]
    assert paths[0].exists() and paths[4].exists()
    assert (tmp_path / "notes.txt").exists()
    assert retention.usage(str(tmp_path)) == retention.DirUsage(2, 20_000)
    # by age: everything older than 1.5 days goes, except the open one and the newest
    assert retention.prune(str(tmp_path), 1.5 * 86400, None, open_now, now=now) == (0, 0)
    assert retention.prune(str(tmp_path), 1.5 * 86400, None, set(), now=now) == (1, 0)
    assert [p.exists() for p in paths] == [False, False, False, False, True]
    assert retention.parse_size("500M") == 500 << 20 and retention.parse_age("36h") == 129600
    with pytest.raises(ValueError):
        retention.parse_size("lots")


def test_docs_list_every_metric_the_exporter_serves(tmp_path: Path) -> None:
    from prometheus_client.process_collector import ProcessCollector

    st = State(servers=(ServerView("db1:5432/postgres", up=True, last_sample=1.0,
                                   sample_seconds=0.1),),
               jobs=(_job(ended=1795651000.0, database="hr"), _job()),
               last_success={("db1:5432/postgres", "sales", "pg_dump"): 1.0},
               recordings_bytes=1, recordings_files=1)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ExporterCollector(lambda: st))
    ProcessCollector(namespace="pgparmon_exporter", registry=reg)
    served = {s.name for f in _parsed(om_latest(reg).decode()).values() for s in f.samples
              if not s.name.endswith("_created")}
    doc = (ROOT / "docs" / "metrics.md").read_text()
    documented = set(re.findall(r"^\| `(pgparmon_[a-z_]+)` \|", doc, re.MULTILINE))
    assert served == documented


def test_last_success_survives_a_restart_and_servers_follow_attach(tmp_path: Path) -> None:
    opts = Options(targets=(ConnTarget(),), record_dir=str(tmp_path))
    first = Exporter(opts)
    first.success("db1:5432/postgres", "sales", "pg_dump", 1795650000.0)
    again = Exporter(opts)
    again.load_success()
    assert again.last_success == {("db1:5432/postgres", "sales", "pg_dump"): 1795650000.0}
    ts = targets("db1", "5433", "mon", "postgres", ["service=db2", "host=db3 user=x"])
    assert [(t.host, t.port, t.user, t.dbname) for t in ts] == [
        ("db1", "5433", "mon", "postgres"), (None, None, "mon", "service=db2"),
        (None, None, None, "host=db3 user=x")]
    assert [t.dbname for t in targets(None, None, None, None, ["service=db2"])] == ["service=db2"]


# ---- the rules ---------------------------------------------------------------------

@pytest.fixture(scope="session")
def prometheus() -> str:
    return _debian_tool("prometheus", "prometheus")


@pytest.fixture(scope="session")
def promtool(prometheus: str) -> str:
    return _debian_tool("promtool", "prometheus")


def test_rules_check_and_unit_tests(promtool: str) -> None:
    res = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run([promtool, "test", "rules", RULE_TESTS.name], capture_output=True,
                         text=True, timeout=60, cwd=RULE_TESTS.parent)
    assert res.returncode == 0, res.stdout + res.stderr
    alerts = {ln.split(":", 1)[1].strip() for ln in RULES.read_text().splitlines()
              if ln.strip().startswith("- alert:")}
    tested = RULE_TESTS.read_text()
    for a in alerts:
        assert f"alertname: {a}" in tested, f"no promtool test for {a}"


# ---- bad input at start (no server needed) ----------------------------------------------

def _exporter_argv(*extra: str, host: str = "127.0.0.1", port: int | str = 1,
                   listen: int | None = None) -> list[str]:
    return pgparmon_cmd("exporter", "-h", host, "-p", str(port), "-U", "postgres", "-d",
                        "postgres", "--listen", f"127.0.0.1:{listen or free_port()}", *extra)


def _one_line_error(argv: list[str], code: int) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == code, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pgparmon: "), res.stderr
    assert "Traceback" not in res.stderr
    return lines[0]


def test_bad_input_gives_one_line_and_a_documented_code(tmp_path: Path) -> None:
    line = _one_line_error(pgparmon_cmd("exporter", "-d", "host='unterminated password=pw1",
                                        "--listen", f"127.0.0.1:{free_port()}"), 2)
    assert "bad connection string" in line and "pw1" not in line
    afile = tmp_path / "afile"
    afile.write_text("")
    line = _one_line_error(_exporter_argv("--record-dir", str(afile / "rec")), 2)
    assert "recordings directory" in line
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        line = _one_line_error(_exporter_argv(listen=busy.getsockname()[1]), 7)
        assert "cannot listen" in line
    line = _one_line_error(_exporter_argv(port=free_port()), 3)  # nothing listens there
    assert "cannot connect" in line
    ro = tmp_path / "ro"
    ro.mkdir()
    if _mount_tmpfs(ro, "ro,size=16k"):
        try:
            line = _one_line_error(_exporter_argv("--record-dir", str(ro)), 2)
            assert "Read-only" in line
        finally:
            subprocess.run(["umount", str(ro)], check=False)


def _mount_tmpfs(path: Path, opts: str) -> bool:
    if os.geteuid() != 0:
        return False
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)],
                         capture_output=True)
    return res.returncode == 0


# ---- the exporter against real jobs ----------------------------------------------------

class Running:
    """The exporter in a process of its own; `tls` (a client SSLContext) and
    `auth` (user, password) when it runs with --web-config."""

    def __init__(self, cluster: Cluster, *extra: str, interval: str = "0.5",
                 tls: ssl.SSLContext | None = None, auth: tuple[str, str] | None = None,
                 umask: int | None = None) -> None:
        self.port = free_port()
        self.tls = tls
        self.auth = auth
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        self.proc = subprocess.Popen(
            pgparmon_cmd("exporter", "-h", str(cluster.sockdir), "-p", str(cluster.port), "-U",
                         "postgres", "-d", "postgres", "--listen", f"127.0.0.1:{self.port}",
                         "--interval", interval, *extra),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
            preexec_fn=None if umask is None else lambda: os.umask(umask))
        self.server = f"local:{cluster.port}/postgres"

    def text(self, timeout: float = 5.0) -> str:
        headers = {"Accept": CONTENT_TYPE_LATEST}
        if self.auth is not None:
            headers["Authorization"] = "Basic " + base64.b64encode(
                ":".join(self.auth).encode()).decode()
        req = urllib.request.Request(
            f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/metrics",
            headers=headers)
        with urllib.request.urlopen(req, timeout=timeout, context=self.tls) as r:
            return str(r.read().decode())

    def families(self) -> dict[str, Any]:
        return _parsed(self.text())

    def value(self, family: str, **labels: str) -> float | None:
        fam = self.families().get(family)
        for s in fam.samples if fam else ():
            if all(s.labels.get(k) == v for k, v in labels.items()) and \
                    not s.name.endswith("_created"):
                return float(s.value)
        return None

    def wait_for(self, family: str, want: float = 1.0, timeout: float = 30.0,
                 **labels: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.stop()
            try:
                if self.value(family, **labels) == want:
                    return
            except OSError:  # not listening yet
                pass
            time.sleep(0.2)
        raise AssertionError(f"{family}{labels} never {want}: {self.text()}")

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        _, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, err


@contextlib.contextmanager
def exporter(cluster: Cluster, *extra: str, **kw: Any) -> Iterator[Running]:
    exp = Running(cluster, *extra, **kw)
    try:
        yield exp
    finally:
        if exp.proc.poll() is None:
            exp.proc.kill()
            exp.proc.wait()


def _dump(cluster: Cluster, sample_db: str, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([cluster.client("pg_dump"), "-Fd", "-j", "2", "-Z", "9", "-f",
                             str(out), sample_db], env=cluster.env(), stderr=subprocess.DEVNULL)


def _signal_tree(pid: int, sig: int) -> None:
    procs = [psutil.Process(pid)]
    with contextlib.suppress(psutil.Error):
        procs += procs[0].children(recursive=True)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)


DUMP = {"kind": "pg_dump", "database": "sample"}


def _prom_query(port: int, q: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def _prom_wait(port: int, q: str, timeout: float = 15.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        res = _prom_query(port, q)
        if res or time.monotonic() > deadline:
            return res
        time.sleep(0.3)


@contextlib.contextmanager
def prometheus_server(binary: str, target_port: int, work: Path,
                      scrape_configs: str | None = None) -> Iterator[int]:
    """A real Prometheus scraping the exporter every second (job `pgparmon`),
    or with `scrape_configs` (the YAML list under that key) instead."""
    port = free_port()
    cfg = work / "prometheus.yml"
    cfg.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {RULES}\n"
        "scrape_configs:\n" + (scrape_configs or (
            "  - job_name: pgparmon\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{target_port}']\n")))
    proc = subprocess.Popen([binary, f"--config.file={cfg}", f"--storage.tsdb.path={work}/tsdb",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "prometheus did not get ready"
            time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


DASHBOARD = ROOT / "contrib" / "grafana" / "pgparmon-jobs.json"


def _dashboard_exprs() -> list[str]:
    """The dashboard's PromQL, its variables at "all"."""
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", ())]
    return [e.replace("$server", ".*").replace("$kind", ".*") for e in exprs]


def test_dashboard_uses_only_served_metrics() -> None:
    doc = (ROOT / "docs" / "metrics.md").read_text()
    documented = set(re.findall(r"^\| `(pgparmon_[a-z_]+)` \|", doc, re.MULTILINE))
    exprs = _dashboard_exprs()
    used = {m for e in exprs for m in re.findall(r"pgparmon_[a-z_]+", e)}
    assert used and used <= documented, used - documented
    assert all("$" not in e for e in exprs)


def _series(labels: dict[str, str]) -> str:
    name = labels["__name__"]
    rest = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{rest}}}"


def _stall_rule_test_from_real_series(prom: int, promtool: str, work: Path) -> None:
    """The stall alert, tested by promtool on the series Prometheus scraped
    from the stopped dump: its labels and how long it had made no progress,
    continued as a stall goes on (the same last-progress time scraped again).
    It must not fire before 10 minutes without progress, and must fire after."""
    (last,) = _prom_query(prom, 'pgparmon_job_last_progress_time_seconds{kind="pg_dump"}')
    (running,) = _prom_query(prom, 'pgparmon_job_state{kind="pg_dump",state="running"} == 1')
    (stalled,) = _prom_query(prom, 'pgparmon_job_bottleneck{kind="pg_dump",'
                             'bottleneck="stalled"} == 1')
    at, value = float(last["value"][0]), float(last["value"][1])
    age = max(0, round(at - value))  # seconds without progress when scraped
    job = {k: v for k, v in last["metric"].items() if k not in ("__name__", "instance", "job")}
    series = [
        # promtool's clock starts at 0: the last progress `age` seconds before it
        {"series": _series({**last["metric"]}), "values": f"{-age}+0x20"},
        {"series": _series({**running["metric"], "__name__": "pgparmon_job_state"}),
         "values": "1+0x20"},
        {"series": _series({**stalled["metric"], "__name__": "pgparmon_job_bottleneck"}),
         "values": "1+0x20"},
    ]
    fired = 15 * 60 + age
    expected = {**job, "severity": "warning", "instance": last["metric"]["instance"],
                "job": last["metric"]["job"]}
    summary = (f"{job['kind']} of {job['database']} on {job['server']} has made no progress "
               f"for {fired // 60}m {fired % 60}s")
    doc = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [{
        "name": "the stall scraped from a stopped pg_dump", "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "PgparmonJobStalled", "exp_alerts": []},
            {"eval_time": "15m", "alertname": "PgparmonJobStalled", "exp_alerts": [
                {"exp_labels": expected, "exp_annotations": {"summary": summary}}]}]}]}
    test_file = work / "stall.rules.test.yml"
    test_file.write_text(json.dumps(doc, indent=1))  # JSON is YAML
    res = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr + test_file.read_text()


@pytest.mark.integration
def test_prometheus_scrapes_a_dump_through_a_stall_to_its_end(
        cluster: Cluster, sample_db: str, workdir: Path, prometheus: str,
        promtool: str) -> None:
    rec = workdir / "rec"
    rec.mkdir()
    rec.chmod(0o755)  # an existing directory every user can list: kept, and said
    now = time.time()
    old = []
    for i in range(3):  # earlier runs' recordings, 40 kB each, oldest first
        p = rec / retention.recording_name(now - (3 - i) * 86400, "old", "pg_dump", "x", i)
        p.write_bytes(os.urandom(40_000))
        os.utime(p, (now - (3 - i) * 86400,) * 2)
        old.append(p)
    with exporter(cluster, "--record-dir", str(rec), "--retain-size", "100k") as exp:
        # a scrape during start-up: the first answer is a whole, valid exposition
        deadline = time.monotonic() + 20
        while True:
            try:
                first = exp.text(timeout=2)
                break
            except OSError:
                assert exp.proc.poll() is None, exp.stop()
                assert time.monotonic() < deadline, "the exporter never answered"
                time.sleep(0.02)
        fams = _parsed(first)
        assert fams["pgparmon_exporter_start_time_seconds"].samples
        assert [s.labels for s in fams["pgparmon_server_up"].samples] == [{"server": exp.server}]
        assert not old[0].exists() and old[1].exists()  # over 100k: the oldest went at start
        exp.wait_for("pgparmon_server_up", server=exp.server)
        with prometheus_server(prometheus, exp.port, workdir) as prom:
            dump = _dump(cluster, sample_db, workdir / "d")
            try:
                exp.wait_for("pgparmon_job_state", state="running", **DUMP)
                _signal_tree(dump.pid, signal.SIGSTOP)
                exp.wait_for("pgparmon_job_bottleneck", bottleneck="stalled", timeout=15, **DUMP)
                assert _prom_wait(prom, 'pgparmon_job_bottleneck{bottleneck="stalled",'
                                  'kind="pg_dump"} == 1')
                _stall_rule_test_from_real_series(prom, promtool, workdir)
            finally:
                _signal_tree(dump.pid, signal.SIGCONT)
            assert dump.wait(timeout=120) == 0
            exp.wait_for("pgparmon_job_state", state="finished", **DUMP)
            done = _prom_wait(prom, 'pgparmon_job_state{state="finished",kind="pg_dump"} == 1')
            assert done and done[0]["metric"]["server"] == exp.server
            assert done[0]["metric"]["database"] == "sample"
            assert "pid" not in done[0]["metric"]
            prog = _prom_query(prom, 'max_over_time(pgparmon_job_progress_ratio[5m])')
            low = _prom_query(prom, 'min_over_time(pgparmon_job_progress_ratio[5m])')
            assert float(prog[0]["value"][1]) == 1.0 and float(low[0]["value"][1]) < 1.0
            assert _prom_query(prom, 'max_over_time(pgparmon_job_state{state="running"}[5m])'
                               ' == 1')
            assert _prom_query(prom, "max_over_time(pgparmon_job_bytes_total[5m]) > 1e6")
            assert _prom_query(prom, "max_over_time(pgparmon_job_throughput_bytes_per_second"
                               "[5m]) > 0")
            assert _prom_query(prom, 'pgparmon_last_success_time_seconds{kind="pg_dump"}')
            assert _prom_query(prom, "max_over_time(pgparmon_host_cpu_ratio[5m]) > 0")
            # the rules file loads and its recording rules work on the real series
            assert _prom_wait(prom, "pgparmon:job_window_end_time_seconds")
            # the Grafana dashboard's queries run on the real series
            answered = [e for e in _dashboard_exprs() if _prom_query(prom, e)]
            assert any("progress_ratio" in e for e in answered), answered
        fams = exp.families()
        assert fams["pgparmon_exporter_recordings_deleted"].samples[0].value >= 1
        code, err = exp.stop()
    assert code == 0, err
    assert "Traceback" not in err
    assert f"the recordings directory {rec} can be listed by every user (mode 0755)" in err
    assert _mode(rec) == 0o755
    mine = [p for p in rec.iterdir() if p.name.endswith(retention.SUFFIX) and p not in old]
    assert len(mine) == 1 and _mode(mine[0]) == 0o600
    total = sum(p.stat().st_size for p in rec.iterdir() if p.name.endswith(retention.SUFFIX))
    assert total <= 100 * 1024 or not any(p.exists() for p in old)
    recording = read_recording(str(mine[0]))
    assert recording.summary is not None and recording.summary["state"] == "finished"
    assert not recording.truncated
    rep = subprocess.run(pgparmon_cmd("report", str(mine[0])), capture_output=True, text=True,
                         timeout=60)
    assert rep.returncode == 0, rep.stderr
    assert "pg_dump" in rep.stdout


def _yaml_blocks(doc: Path, section: str) -> list[str]:
    """The ```yaml blocks of a Markdown file's section (a heading holding
    `section`, up to the next heading of its level or above)."""
    blocks: list[str] = []
    level, fence, lang = 0, None, ""
    for line in doc.read_text().splitlines(keepends=True):
        if fence is not None:  # in a fenced block ('#' there is YAML's comment)
            if line.startswith("```"):
                if level and lang == "yaml":
                    blocks.append("".join(fence))
                fence = None
            else:
                fence.append(line)
        elif line.startswith("```"):
            fence, lang = [], line[3:].strip()
        elif m := re.match(r"(#+) ", line):
            if level and len(m.group(1)) <= level:
                break
            if not level and section in line:
                level = len(m.group(1))
    assert level, f"no section {section!r} in {doc}"
    return blocks


def _prom_targets(port: int) -> dict[str, dict[str, Any]]:
    """The scrape targets' health and last error, by scrape job."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=10) as r:
        doc = json.loads(r.read())
    return {t["labels"]["job"]: t for t in doc["data"]["activeTargets"]}


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.integration
def test_prometheus_scrapes_over_tls_with_basic_auth_and_the_recordings_are_private(
        cluster: Cluster, sample_db: str, workdir: Path, prometheus: str, pki: Any,
        pw_hash: str) -> None:
    """The README's fleet setup: a real Prometheus scrapes the exporter with
    `scheme: https`, the CA that signed its certificate and basic auth, and
    gets the series; without credentials it gets 401, with a CA that did not
    sign the certificate the scrape fails. The exporter, started under umask
    0, creates its recordings directory (and the parent it needs) 0700 and
    the dump's recording and last-success.json 0600."""
    from conftest import PASSWORD

    web = workdir / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {pki.server[0]}\n"
                   f"  key_file: {pki.server[1]}\nbasic_auth_users:\n  prometheus: {pw_hash}\n")
    web.chmod(0o600)
    password_file = workdir / "password"
    password_file.write_text(PASSWORD)
    rec = workdir / "private" / "rec"
    client = ssl.create_default_context(cafile=pki.ca[0])
    with exporter(cluster, "--web-config", str(web), "--record-dir", str(rec), tls=client,
                  auth=("prometheus", PASSWORD), umask=0) as exp:
        exp.wait_for("pgparmon_server_up", server=exp.server)  # over TLS, with the password

        # the scrape job docs/metrics.md gives, its paths and targets this test's
        documented = _yaml_blocks(ROOT / "docs" / "metrics.md", "TLS and basic auth")[1]
        assert "scheme: https" in documented and "basic_auth:" in documented
        doc_job = documented.split("scrape_configs:\n", 1)[1]
        doc_job = re.sub(r"targets: \[[^]]*\]", f"targets: ['127.0.0.1:{exp.port}']", doc_job)
        doc_job = re.sub(r"password_file: \S+", f"password_file: {password_file}", doc_job)

        def job(name: str, ca: str, auth: bool) -> str:
            text = re.sub(r"ca_file: \S+", f"ca_file: {ca}", doc_job)
            text = text.replace("job_name: pgparmon", f"job_name: {name}")
            if not auth:
                text = re.sub(r"\n +basic_auth:\n( +\w+: .*\n)+", "\n", text)
                assert "basic_auth" not in text and "password" not in text, text
            return text

        scrape = (job("pgparmon", pki.ca[0], True) + job("no-credentials", pki.ca[0], False)
                  + job("wrong-ca", pki.wrong_ca[0], True))
        with prometheus_server(prometheus, exp.port, workdir, scrape) as prom:
            dump = _dump(cluster, sample_db, workdir / "d")
            assert dump.wait(timeout=120) == 0
            exp.wait_for("pgparmon_job_state", state="finished", **DUMP)
            assert _prom_wait(prom, 'pgparmon_job_state{job="pgparmon",state="finished",'
                              'kind="pg_dump"} == 1')
            assert _prom_query(prom, 'pgparmon_server_up{job="pgparmon"} == 1')
            assert _prom_query(prom, 'up{job="pgparmon"} == 1')
            deadline = time.monotonic() + 20
            while True:
                targets = _prom_targets(prom)
                if all(targets[j]["health"] != "unknown" for j in targets):
                    break
                assert time.monotonic() < deadline, targets
                time.sleep(0.3)
            assert targets["no-credentials"]["health"] == "down"
            assert "401" in targets["no-credentials"]["lastError"], targets["no-credentials"]
            assert targets["wrong-ca"]["health"] == "down"
            assert "certificate" in targets["wrong-ca"]["lastError"], targets["wrong-ca"]
            assert not _prom_query(prom, 'pgparmon_server_up{job=~"no-credentials|wrong-ca"}')
        code, err = exp.stop()
    assert code == 0, err
    assert "Traceback" not in err and PASSWORD not in err and pw_hash not in err
    assert "serving https://" in err and "TLS handshake with 127.0.0.1 failed" in err
    assert _mode(rec.parent) == 0o700 and _mode(rec) == 0o700
    recordings = [p for p in rec.iterdir() if p.name.endswith(retention.SUFFIX)]
    assert len(recordings) == 1 and _mode(recordings[0]) == 0o600
    assert read_recording(str(recordings[0])).summary is not None
    assert _mode(rec / "last-success.json") == 0o600
    assert sorted(p.name for p in rec.iterdir()) == sorted(
        [recordings[0].name, "last-success.json"])


@pytest.mark.integration
def test_a_job_found_running_counts_from_its_own_start(cluster: Cluster, sample_db: str,
                                                       workdir: Path) -> None:
    """A dump that began before the exporter saw it: its start time and its
    counters' _created are the dump's process start, as the samples' elapsed
    time counts it, not when the exporter found it."""
    with dump_held_at_start(cluster, sample_db, workdir / "d") as dump:
        time.sleep(1)  # it has run a while when the exporter starts
        with exporter(cluster) as exp:
            exp.wait_for("pgparmon_job_state", state="running", **DUMP)
            deadline = time.monotonic() + 20
            # its first sample (the first with a verdict) settles the start
            while True:
                fams = exp.families()
                if any(s.value == 1.0 for s in fams["pgparmon_job_bottleneck"].samples):
                    break
                assert time.monotonic() < deadline, exp.text()
                time.sleep(0.2)
            start = [s.value for s in fams["pgparmon_job_start_time_seconds"].samples]
            created = [s.value for s in fams["pgparmon_job_bytes"].samples
                       if s.name.endswith("_created")]
            # the process began between these two clock readings (10 ms ticks)
            assert dump.before - 0.02 <= start[0] <= dump.after + 0.02, (start, dump)
            assert created == start
            dump.release()
            assert dump.proc.wait(timeout=120) == 0
            exp.wait_for("pgparmon_job_state", state="finished", **DUMP)


@pytest.mark.integration
def test_server_restart_mid_job_and_a_full_recordings_disk(
        cluster: Cluster, sample_db: str, workdir: Path) -> None:
    small = workdir / "small"
    small.mkdir()
    if not _mount_tmpfs(small, "size=64k"):
        pytest.skip("cannot mount a small tmpfs (not root)")
    try:
        with exporter(cluster, "--record-dir", str(small)) as exp:
            exp.wait_for("pgparmon_server_up", server=exp.server)
            with open(small / "filler", "wb", buffering=0) as f:  # fill the recordings disk
                with contextlib.suppress(OSError):
                    while True:
                        f.write(b"\0" * 4096)
            dump = _dump(cluster, sample_db, workdir / "r")
            exp.wait_for("pgparmon_job_state", state="running", **DUMP)
            cluster.restart("fast")
            assert dump.wait(timeout=60) != 0
            exp.wait_for("pgparmon_job_state", state="failed", **DUMP)
            exp.wait_for("pgparmon_server_up", server=exp.server)  # connected again
            assert (exp.value("pgparmon_exporter_errors", server=exp.server) or 0) >= 1
            assert (exp.value("pgparmon_exporter_recording_errors") or 0) >= 1
            assert exp.value("pgparmon_last_success_time_seconds", **DUMP) is None
            assert exp.proc.poll() is None
            code, err = exp.stop()
        assert code == 0, err
        assert "Traceback" not in err and "No space left" in err
    finally:
        subprocess.run(["umount", str(small)], check=False)


@pytest.mark.integration
def test_sigterm_mid_job_ends_the_recording(cluster: Cluster, sample_db: str,
                                            workdir: Path) -> None:
    rec = workdir / "rec"
    with exporter(cluster, "--record-dir", str(rec)) as exp:
        dump = _dump(cluster, sample_db, workdir / "t")
        try:
            exp.wait_for("pgparmon_job_state", state="running", **DUMP)
            _signal_tree(dump.pid, signal.SIGSTOP)
            code, err = exp.stop()
        finally:
            _signal_tree(dump.pid, signal.SIGKILL)
            _signal_tree(dump.pid, signal.SIGCONT)
            dump.wait()
    assert code == 0, err
    files = [p for p in rec.iterdir() if p.name.endswith(retention.SUFFIX)]
    assert len(files) == 1
    recording = read_recording(str(files[0]))
    assert not recording.truncated and recording.samples
    assert recording.summary is not None and recording.summary["state"] == "running"



@pytest.mark.integration
def test_back_to_back_dumps_are_two_jobs(cluster: Cluster, sample_db: str,
                                         workdir: Path) -> None:
    """The next dump starts while the last one's end is being judged: it is
    found and followed on its own (an ended job's sessions hide no new run),
    and the first is not judged on the second's sessions (on this idle
    database both share their snapshot's xmin, which is how the pg_dump
    driver groups sessions)."""
    rec = workdir / "rec"
    with exporter(cluster, "--record-dir", str(rec)) as exp:
        exp.wait_for("pgparmon_server_up", server=exp.server)
        for i in range(2):
            dump = subprocess.Popen([cluster.client("pg_dump"), "-Fd", "-j", "2", "-f",
                                     str(workdir / f"b{i}"), sample_db], env=cluster.env())
            assert dump.wait(timeout=120) == 0
        deadline = time.monotonic() + 30
        while True:
            recs = sorted(rec.glob("*" + retention.SUFFIX))
            summaries = [read_recording(str(p)).summary for p in recs]
            if len(recs) == 2 and all(summaries):
                break
            assert time.monotonic() < deadline, (sorted(p.name for p in recs), summaries)
            time.sleep(0.3)
        exp.wait_for("pgparmon_job_state", state="finished", **DUMP)
        code, err = exp.stop()
    assert code == 0, err
    assert [(s or {}).get("state") for s in summaries] == ["finished", "finished"], err


@pytest.mark.integration
def test_a_restore_in_steps_is_one_job(cluster: Cluster, dump_archive: Path,
                                       workdir: Path) -> None:
    """`bash -c 'pg_restore -j 2 --section=data ... && pg_restore -j 2
    --section=post-data ...'`: the exporter follows one job into its second
    step (the discovery pass that sees the second pg_restore leaves it to
    the job it is a step of), with one recording that ends finished."""
    db = "exp_steps"
    steps = restore_in_steps(cluster, dump_archive, db)
    rec = workdir / "rec"
    labels = {"kind": "pg_restore", "database": db}
    with exporter(cluster, "--record-dir", str(rec)) as exp, \
            psycopg.connect(cluster.conninfo(), autocommit=True) as watch:
        exp.wait_for("pgparmon_server_up", server=exp.server)
        with table_lock_held(cluster, db, "orders") as release:
            chain = subprocess.Popen(["bash", "-c", steps], env=cluster.env())
            wait_until(watch, "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND "
                              "application_name = 'pg_restore' AND wait_event_type = 'Lock'",
                       db, chain)
            exp.wait_for("pgparmon_job_state", state="running", **labels)
            release()
            assert chain.wait(timeout=120) == 0
        exp.wait_for("pgparmon_job_state", state="finished", **labels)
        code, err = exp.stop()
    assert code == 0, err
    recs = sorted(rec.glob("*" + retention.SUFFIX))
    assert len(recs) == 1, (sorted(p.name for p in recs), err)
    summary = read_recording(str(recs[0])).summary
    assert summary is not None and summary["state"] == "finished", summary
    assert any(n.startswith("step 2: ") for n in summary["notes"]), summary["notes"]
    assert {"data", "index"} <= {i["kind"] for i in summary["items"]}
    cluster.psql(f"DROP DATABASE {db}")


@pytest.mark.integration
def test_idle_costs_one_query_per_interval(cluster: Cluster, workdir: Path) -> None:
    """No job on the server: every statement the exporter sends is the one
    discovery query, once per interval (the server's own statement log)."""
    cluster.psql("ALTER SYSTEM SET log_statement = 'all'")
    cluster.psql("ALTER SYSTEM SET log_line_prefix = '%m [%a] '")
    cluster.psql("SELECT pg_reload_conf()")
    try:
        with exporter(cluster) as exp:
            exp.wait_for("pgparmon_server_up", server=exp.server)
            # past the start-up's queries (server facts): a sampling pass is done
            deadline = time.monotonic() + 60
            while exp.value("pgparmon_exporter_last_sample_time_seconds",
                            server=exp.server) is None:
                assert time.monotonic() < deadline, "the exporter never sampled"
                time.sleep(0.1)
            start = cluster.logfile.stat().st_size
            t0 = time.monotonic()
            time.sleep(4.0)
            with open(cluster.logfile, "rb") as f:
                f.seek(start)
                log = f.read().decode(errors="replace")
            elapsed = time.monotonic() - t0
            code, err = exp.stop()
        assert code == 0, err
    finally:
        cluster.psql("ALTER SYSTEM RESET log_statement")
        cluster.psql("ALTER SYSTEM RESET log_line_prefix")
        cluster.psql("SELECT pg_reload_conf()")
    mine = [ln for ln in log.splitlines() if "[pgparmon] LOG:" in ln
            and ("statement:" in ln or "execute" in ln)]
    # at most one a pass, a pass at most every 0.5 s; on a busy machine a
    # pass may come late (fewer, never more): no lower bound but "it samples"
    per_interval = len(mine) / (elapsed / 0.5)
    assert mine and per_interval <= 1.25, (len(mine), elapsed, mine[:3])
    assert all("One sample, one round trip" in ln for ln in mine), mine[:3]
