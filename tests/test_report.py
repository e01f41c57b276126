"""The HTML / text report and the live advice it shares with the TUI, from
sample docs of real jobs (see jobdocs.py); the HTML is also rendered in a
real headless Chromium."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from jobdocs import JobRun, dump_run, golden, restore_run
from rich.console import Console

from pgparmon.analyze.advice_live import AdviceTracker, advise_samples
from pgparmon.cluster import Cluster
from pgparmon.playback import replay_command, report_command
from pgparmon.sample import Sample, read_samples
from pgparmon import units as fmt
from pgparmon.views.report import build_html, render_summary_text
from pgparmon.views.summary import GROUP_MIN, ItemGroup, end_summary
from pgparmon.views.text import summary_table

Doc = dict[str, Any]


@pytest.fixture(scope="module")
def dump(cluster: Cluster, sample_db: str) -> JobRun:
    return dump_run(cluster, sample_db)


@pytest.fixture(scope="module")
def restore(cluster: Cluster, dump_archive: Path) -> JobRun:
    return restore_run(cluster, dump_archive)


def _header(run: JobRun) -> dict[str, Any]:
    from pgparmon.record import read_recording

    return read_recording(str(run.recording)).header


class Outline(HTMLParser):
    """Tags with their ids, table rows per table id, every attribute value."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, str | None]] = []
        self.rows: dict[str, int] = {}
        self.attrs: list[tuple[str, str]] = []
        self._table: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a.get("id")))
        self.attrs += [(k, v or "") for k, v in attrs]
        if tag == "table":
            self._table.append(a.get("id") or "")
        if tag == "tr" and self._table:
            self.rows[self._table[-1]] = self.rows.get(self._table[-1], 0) + 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._table:
            self._table.pop()


def outline(page: str) -> Outline:
    o = Outline()
    o.feed(page)
    return o


@pytest.mark.integration
def test_html_of_a_real_dump_has_the_charts_and_tables(dump: JobRun) -> None:
    page = build_html(read_samples(dump.samples), dump.summary, _header(dump))
    o = outline(page)
    svgs = {i for t, i in o.tags if t == "svg"}
    assert {"gantt", "throughput", "cpu", "disk"} <= svgs
    # the per-table table: a header row plus one row per item of the summary
    assert o.rows["items"] == 1 + len(dump.summary["items"])
    assert o.rows["facts"] >= 10 and o.rows["verdicts"] >= 2
    assert ("div", "advice") in o.tags
    assert "public.orders" in page and "pg_dump" in page
    # one bar per item the samples showed on a worker, in the Gantt chart
    assert page.count('<g class="span">') >= 3
    # self-contained: nothing to fetch (the SVG namespace is a name, not a fetch)
    assert not [v for k, v in o.attrs if k in ("src", "href")]
    assert "<script" not in page and "<link" not in page
    assert "https://" not in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


@pytest.mark.integration
def test_html_of_a_real_restore_shows_index_and_constraint_items(restore: JobRun) -> None:
    page = build_html(read_samples(restore.samples), restore.summary, _header(restore))
    kinds = {i["kind"] for i in restore.summary["items"]}
    assert {"data", "index", "constraint"} <= kinds
    for k in ("index", "constraint"):
        assert f"<td>{k}</td>" in page
    assert 'id="gantt"' in page


@pytest.mark.integration
def test_everything_from_the_run_is_escaped(dump: JobRun) -> None:
    evil = '<script>alert("x")</script>&"'
    samples = copy.deepcopy(dump.samples)
    summary = copy.deepcopy(dump.summary)
    for d in samples:
        d["job"]["command"] = ["pg_dump", evil]
        d["notes"] = [evil]
        for w in d["workers"]:
            if w["item"] == "public.orders":
                w["item"] = evil
    summary["items"][0]["name"] = evil
    page = build_html(read_samples(samples), summary,
                      {"facts": {"settings": {"work_mem": evil}}})
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&quot;" in page


@pytest.mark.integration
def test_html_renders_in_headless_chromium(dump: JobRun, tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed and could not be (./run test installs it "
                    "with apt-get when run as root)")
    page = tmp_path / "report.html"
    page.write_text(build_html(read_samples(dump.samples), dump.summary, _header(dump)),
                    encoding="utf-8")
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    env = {**os.environ, "HOME": str(tmp_path)}
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120, env=env, check=False)
    assert dom.returncode == 0, dom.stderr[-2000:]
    o = outline(dom.stdout)
    assert {"gantt", "throughput", "cpu", "disk"} <= {i for t, i in o.tags if t == "svg"}
    assert o.rows["items"] == 1 + len(dump.summary["items"])
    shot = tmp_path / "report.png"
    res = subprocess.run([*flags, "--hide-scrollbars", "--window-size=1100,1400",
                          f"--screenshot={shot}", page.as_uri()], capture_output=True,
                         text=True, timeout=120, env=env, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


@pytest.mark.integration
def test_summary_text_for_a_terminal(dump: JobRun) -> None:
    console = Console(record=True, width=120, color_system=None)
    console.print(render_summary_text(read_samples(dump.samples), dump.summary))
    text = console.export_text()
    assert "pg_dump -j 2 on sample: finished" in text
    assert "advice:" in text and "public.orders" in text and "idle share" in text


@pytest.mark.integration
def test_report_and_replay_commands_read_a_real_recording(dump: JobRun, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    # wide enough that the items table shows whole table names: at 80
    # columns they are cut, and whether the advice line names the big table
    # depends on how many samples a fast run left
    monkeypatch.setenv("COLUMNS", "160")
    rec = str(dump.recording)
    assert report_command(rec, None) == 0
    out = capsys.readouterr().out
    assert "pg_dump -j 2 on sample" in out and "public.orders" in out
    html_path = tmp_path / "r.html"
    assert report_command(rec, str(html_path)) == 0
    assert 'id="gantt"' in html_path.read_text(encoding="utf-8")
    capsys.readouterr()
    # not a terminal: replay prints one line per sample, then the summary
    assert replay_command(rec, 1000.0) == 0
    out = capsys.readouterr().out
    assert out.count("pg_dump -j 2") >= 3 and "finished" in out
    bad = tmp_path / "not-a-recording"
    bad.write_text("hello\n")
    assert report_command(str(bad), None) == 2
    assert replay_command(str(bad), 1.0) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "not a pgparmon recording" in err


@pytest.mark.integration
def test_live_and_report_advice_agree(dump: JobRun, restore: JobRun) -> None:
    for run in (dump, restore):
        samples = read_samples(run.samples)
        live = AdviceTracker()
        for d in samples:
            live.add(d)
        assert live.advice() == advise_samples(samples)
        page = build_html(samples, run.summary, None)
        assert live.advice().headline.split(":")[0] in page
    early = advise_samples(read_samples(dump.samples[:2]))
    assert early.next_jobs is None and "not enough data yet" in early.headline


# ---- units ---------------------------------------------------------------------


def test_one_unit_convention() -> None:
    """SI sizes (base 1000), rates, durations, counts: README.md, "Units"."""
    assert [fmt.size(x) for x in (None, 0, 850, 999.6, 14.2e6, 4 * 1024 ** 3)] == \
        ["-", "0 B", "850 B", "1.0 kB", "14.2 MB", "4.3 GB"]
    assert fmt.rate(12.3e6) == "12.3 MB/s" and fmt.rate(None) == "-"
    assert [fmt.about(x) for x in (None, 0.997, 0.25, 0.3049, 12.34)] == \
        ["-", "1.0 s", "250 ms", "300 ms", "12.0 s"]
    assert [fmt.duration(x) for x in (None, 0.85, 4.2, 59.99, 185, 7380)] == \
        ["-", "850 ms", "4.2 s", "1 min 00 s", "3 min 05 s", "2 h 03 min"]
    assert fmt.count(12_345) == "12.3k" and fmt.count_exact(1_234_567) == "1,234,567"


# ---- the end summary: whole names, short items grouped -------------------------

LONG_NAMES = ("public.customer_order_line_items_archive_2023_partition_q4_by_region",
              "public.warehouse_inventory_snapshots_with_a_really_long_descriptive_name",
              "analytics.daily_aggregated_page_views_per_country_and_device_type")


def _many_small_tables() -> tuple[list[Sample], Doc]:
    """The samples of a real restore (0.3 s apart, tests/golden/tui) and a
    summary doc shaped as monitor.summary() writes it: three big tables with
    long names, 200 small tables seen done at one sample (0.0 s measured, as
    a table shorter than the interval is), 3 more small ones at a later
    sample (a group of their own) and one alone at a third: a row of its
    own, with no measured duration."""
    samples = golden("restore_index")
    ts = [d["ts"] for d in samples]

    def item(name: str, at: int, dur: float, nbytes: int, worker: int) -> Doc:
        return {"key": f"TABLE DATA {name}", "kind": "data", "name": name, "relation": name,
                "worker": worker, "state": "done", "started": ts[at], "duration_s": dur,
                "bytes": nbytes, "tuples": nbytes // 70, "work": nbytes}

    items = [item(n, 1, 6.0 - i, 300_000_000 - i * 50_000_000, 13063 + i % 2)
             for i, n in enumerate(LONG_NAMES)]
    items += [item(f"public.lookup_{i:03d}", 10, 0.0, 70_000, 13063 + i % 2) for i in range(200)]
    items += [item(f"public.late_{i}", 12, 0.0, 8_000, 13064) for i in range(3)]
    items += [item("public.last_one", 14, 0.0, 5_000, 13063)]
    summary = {"schema": "pgparmon.summary/1", "kind": "pg_restore", "database": "restored",
               "jobs": 2, "state": "finished", "reason": "exit code 0", "exit_code": 0,
               "wall_s": samples[-1]["elapsed_s"], "items": items, "notes": []}
    return read_samples(samples), summary


def test_short_items_finished_in_one_interval_are_one_row() -> None:
    samples, summary = _many_small_tables()
    es = end_summary(summary, samples)
    assert es.interval is not None and 0.28 < es.interval < 0.32
    groups = [r for r in es.rows if isinstance(r, ItemGroup)]
    assert [g.count for g in groups] == [200, 3] and groups[0].bytes == 14_000_000
    # the samples before and after the one that saw them done
    assert (groups[0].after_s, groups[0].by_s) == (samples[9].elapsed_s, samples[10].elapsed_s)
    assert (groups[1].after_s, groups[1].by_s) == (samples[11].elapsed_s,
                                                   samples[12].elapsed_s)
    assert groups[0].workers == 2 and groups[1].workers == 1
    # 3 long tables, the lone short one on a row of its own, then the groups
    assert GROUP_MIN == 2 and len(es.rows) == 3 + 1 + 2
    assert [r.name for r in es.rows[:3]] == list(LONG_NAMES)  # longest first
    assert len(es.items) == 207  # every item is still there, for the HTML
    assert o_rows(build_html(samples, summary, None)) == 1 + 207
    about = fmt.about(es.interval)
    for view in (render_summary_text(samples, summary), summary_table(es)):
        console = Console(record=True, width=200, color_system=None)
        console.print(view)
        text = console.export_text()
        window = fmt.period(samples[9].elapsed_s, samples[10].elapsed_s)
        assert f"200 small tables, done {window}" in text
        assert "3 small tables, done" in text and "14.0 MB" in text
        assert "public.lookup_" not in text and "public.late_" not in text
        # an item done between two samples has no measured duration or rate
        lone = next(ln for ln in text.splitlines() if ln.startswith("public.last_one"))
        assert f"< {about}" in lone and "B/s" not in lone
        assert " 0 ms" not in lone.replace(f"< {about}", "")
        assert all(n in text for n in LONG_NAMES) and "…" not in text


def test_report_never_cuts_an_item_name() -> None:
    """On a narrow terminal a long name folds onto the next line (every
    column that can give way has)."""
    samples, summary = _many_small_tables()
    console = Console(record=True, width=90, color_system=None)
    console.print(render_summary_text(samples, summary))
    text = console.export_text()
    assert "…" not in text and "14.0 MB" in text and "300.0 MB" in text
    # the item column's pieces, line after line, make the whole name again
    lines = text.splitlines()
    for name in LONG_NAMES:
        name = name.removeprefix("public.")  # below 100 columns, as the TUI
        i = next(k for k, ln in enumerate(lines) if ln.startswith(name[:12]))
        width = len(lines[i].split(" ")[0])
        whole = "".join(ln[:width].strip() for ln in lines[i:i + 8])
        assert whole.startswith(name)


def o_rows(page: str) -> int:
    return outline(page).rows["items"]


# ---- the advice rule on shaped runs -------------------------------------------


def _shaped(rates: list[tuple[int, float, int]], jobs: int = 8,
            cpu: float = 40.0) -> list[Sample]:
    """Samples 1 s apart: for each (streams, total bytes/s, seconds), that
    many workers copying at that total rate."""
    docs: list[Doc] = []
    t = 0.0
    done: dict[int, int] = {}
    for streams, rate, secs in rates:
        for _ in range(secs):
            workers = []
            for pid in range(1, streams + 1):
                done[pid] = done.get(pid, 0) + int(rate / streams)
                workers.append({"pid": pid, "phase": "copy", "item": f"t{pid}",
                                "bytes_done": done[pid]})
            docs.append({"elapsed_s": t, "job": {"jobs": jobs, "state": "running",
                                                 "active_workers": streams,
                                                 "items_total": 100, "items_done": 0},
                         "workers": workers, "server": {"error": None},
                         "host": {"cpu_percent": cpu, "per_cpu": [cpu] * 16, "disks": {}}})
            t += 1.0
    return read_samples(docs)


def test_advice_finds_where_more_workers_stop_paying() -> None:
    a = advise_samples(_shaped([(1, 50e6, 6), (2, 95e6, 6), (4, 98e6, 6), (8, 99e6, 6)]))
    assert a.status == "flat" and a.next_jobs == 2
    assert "stopped paying off at 2" in a.headline and "-j 2" in a.headline


def test_advice_while_still_rising_suggests_more() -> None:
    a = advise_samples(_shaped([(4, 40e6, 6), (8, 80e6, 6)], jobs=8))
    assert a.status == "rising" and a.next_jobs is not None and a.next_jobs > 8


def test_advice_says_when_it_cannot_tell() -> None:
    a = advise_samples(_shaped([(8, 80e6, 2)]))
    assert a.next_jobs is None and "not enough data yet" in a.headline
    a = advise_samples(_shaped([(8, 80e6, 6)], cpu=20.0))
    assert a.next_jobs is None and "only 8 workers" in a.headline
    a = advise_samples(_shaped([(8, 80e6, 6)], cpu=99.0))
    assert a.status == "cpu-bound" and a.next_jobs == 8
