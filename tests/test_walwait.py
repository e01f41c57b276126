"""What a backup waits on around its copy (pgparmon/jobs/walwait.py), from
readings made up here: the archiver's backlog before a segment, its pace
(only while it has work), a stats reset, a failing archive_command, a spread
checkpoint's bound, and the words the verdicts use. The real tools are in
tests/test_pgbackrest.py and tests/test_basebackup.py."""

from __future__ import annotations

from typing import Any

import pytest

from pgparmon.jobs.walwait import (
    WalWatch,
    archiving_text,
    checkpoint_text,
    next_look,
    segment_name,
    segment_number,
    wait_doc,
    wait_reason,
)
from pgparmon.snapshot import Backend, DbSample, Snapshot

MB = 1 << 20
SEG = 16 * MB


def _snap(ts: float, archived: int, last: str | None, lsn: int, failed: int = 0,
          failed_t: float | None = None, ok_t: float | None = 1.0,
          server_ts: float | None = None, backends: tuple[Backend, ...] = ()) -> Snapshot:
    db = DbSample(server_ts=server_ts if server_ts is not None else 1000.0 + ts,
                  archiver=(archived, failed, "000000010000000000000003" if failed else None,
                            failed_t, ok_t, last),
                  wal=(lsn, SEG, 300.0, 0.9), backends=backends)
    return Snapshot(ts=ts, wall=1e9 + ts, db=db, host=None)


def _name(n: int) -> str:
    return segment_name(1, n, SEG)


def test_segment_names_and_numbers() -> None:
    assert segment_number("0000000100000001000000A3", SEG) == 256 + 0xA3
    assert segment_name(1, 256 + 0xA3, SEG) == "0000000100000001000000A3"
    # 1 MB segments: 4096 to a log file
    assert segment_number("000000010000000200000005", MB) == 2 * 4096 + 5
    assert segment_name(2, 2 * 4096 + 5, MB) == "000000020000000200000005"
    for other in ("00000002.history", "000000010000000000000003.00000028.backup",
                  "000000010000000000000003.partial", None, ""):
        assert segment_number(other, SEG) is None
    assert segment_number("000000010000000000000003", None) is None


def test_the_backlog_its_pace_and_the_time_left() -> None:
    """64 segments written past the archiver's last; the backup waits for
    the newest completed one. Before two segments over 2 s: measuring; then
    the pace and the time left; the target stays once fixed while WAL goes
    on being written."""
    ww = WalWatch()
    lsn = 65 * SEG + 100  # writing segment 65: 64 is the newest completed
    ww.observe(_snap(0.0, 10, _name(0), lsn))
    ww.aim("start", fixed=True)
    a = ww.archiving("start")
    assert a is not None and a["segments"] == 64 and a["bytes"] == 64 * SEG
    assert a["wal"] == _name(64) and a["last_archived_wal"] == _name(0)
    assert a["pace"] == "measuring" and a["left_s"] is None
    assert "64 segment(s) (1.1 GB) queued up to the segment x (000000010000000000000040)" \
        in archiving_text(a, "the segment x") and "measuring" in archiving_text(a, "x")
    for i in range(1, 5):  # one segment archived a second; WAL goes on
        ww.observe(_snap(float(i), 10 + i, _name(i), lsn + i * SEG))
        ww.aim("start", fixed=True)
    a = ww.archiving("start")
    assert a is not None and a["segments"] == 60 and a["wal"] == _name(64)
    assert a["pace"] == "measured" and a["segments_per_s"] == 1.0
    assert a["bytes_per_s"] == float(SEG) and a["left_s"] == 60.0
    text = archiving_text(a, "the segment x")
    assert text.startswith("archiving: 60 segment(s) (1.0 GB) queued up to the segment x")
    assert text.endswith("archive_command archives 1 segments/s (16.8 MB/s): about 1 min 00 s")
    doc = wait_doc("start", None, a)
    assert doc is not None and doc["on"] == "archiving" and doc["left_s"] == 60.0
    # while copying: the archiver needs 60 s more for what is completed so
    # far (64 + 4 written since): what lasts beyond the copy's rest
    assert ww.stop_ahead(20.0) == 68 - 4 - 20.0


def test_the_pace_counts_only_the_archivers_work() -> None:
    """A caught-up archiver archives a segment now and then: that is no
    measure of its speed. Its pace is over the intervals it had work."""
    ww = WalWatch()
    for i in range(40):  # caught up for 40 s: one segment every 10 s
        n = i // 10
        ww.observe(_snap(float(i), n, _name(n), (n + 1) * SEG + 10))
    assert ww.pace() == (None, "measuring")
    base = 3
    for j in range(1, 7):  # then 20 segments behind: 2 a second
        ww.observe(_snap(40.0 + j, base + 2 * j, _name(base + 2 * j), 30 * SEG))
    rate, how = ww.pace()
    assert how == "measured" and rate is not None and abs(rate - 2.0) < 0.35, rate


def test_stuck_failing_and_a_stats_reset() -> None:
    ww = WalWatch()
    for i in range(12):  # 12 s with work and nothing archived
        ww.observe(_snap(float(i), 5, _name(5), 20 * SEG))
    ww.aim("stop", fixed=True)
    a = ww.archiving("stop")
    assert a is not None and a["pace"] == "stuck" and a["left_s"] is None
    assert "archived nothing for 10.0 s or more" in archiving_text(a, "x")
    assert wait_reason(wait_doc("stop", None, a)) == \
        "waiting for WAL archiving: nothing archived lately (14 segment(s) queued)"
    # archive_command fails: its last failure after its last success
    ww.observe(_snap(12.0, 5, _name(5), 20 * SEG, failed=3, failed_t=50.0, ok_t=1.0))
    a = ww.archiving("stop")
    assert a is not None and a["pace"] == "failing"
    assert a["failing"] == ("archive_command fails (3 failure(s) since the backup began; last "
                            "failed segment 000000010000000000000003)")
    text = archiving_text(a, "x", "the backup never ends")
    assert "fix archive_command (the server log says why), or the backup never ends" in text
    # the statistics reset: the pace starts again
    ww.observe(_snap(13.0, 0, None, 20 * SEG))
    assert ww.hist == [(13.0, 0, True)] and ww.pace() == (None, "measuring")


def test_before_the_statement_the_segment_being_written_is_the_one() -> None:
    """Before the tool's statement switches out of the segment being
    written (`ahead`), the target follows the WAL; once `fixed`, it stays."""
    ww = WalWatch()
    ww.observe(_snap(0.0, 1, _name(1), 9 * SEG + 5))
    ww.aim("start", fixed=False, ahead=1)
    assert ww.waits["start"]["segno"] == 9
    ww.observe(_snap(1.0, 1, _name(1), 11 * SEG + 5))
    ww.aim("start", fixed=True)
    ww.observe(_snap(2.0, 1, _name(1), 15 * SEG))
    ww.aim("start", fixed=True)
    assert ww.waits["start"]["segno"] == 10
    a = ww.archiving("start")
    assert a is not None and a["segments"] == 9
    # no last archived segment (nothing archived since the stats reset)
    none = WalWatch()
    none.observe(_snap(0.0, 0, None, 3 * SEG))
    none.aim("stop", fixed=True)
    b = none.archiving("stop")
    assert b is not None and b["segments"] is None and b["left_s"] is None
    assert "position is not known" in archiving_text(b, "x")
    # a recording made before these readings: nothing to say
    old = WalWatch()
    old.observe(Snapshot(ts=0.0, wall=0.0, db=DbSample(archiver=(1, 0, None, None, 1.0)),
                         host=None))
    old.aim("stop", fixed=True)
    assert old.archiving("stop") is None and old.failing() is None


def _session(query_start: float) -> Backend:
    return Backend(pid=7, datname="postgres", usename="backup", application_name="x",
                   client_addr=None, client_port=None, backend_start=query_start,
                   xact_start=query_start, query_start=query_start, state="active",
                   wait_event_type=None, wait_event=None, backend_type="client backend",
                   backend_xmin=None, leader_pid=None, query="SELECT pg_backup_start($1, $2)")


def test_a_spread_checkpoint_its_bound_and_the_way_out() -> None:
    ww = WalWatch()
    snap = _snap(0.0, 1, _name(1), 2 * SEG, server_ts=1030.0)
    ww.observe(snap)
    ck = ww.checkpoint(snap, _session(1000.0), fast=False)
    assert (ck["bound_s"], ck["waited_s"], ck["left_s"], ck["past_bound"]) == \
        (270.0, 30.0, 240.0, False)
    text = checkpoint_text(ck, "--checkpoint=fast", "the backup")
    assert text == ("waiting for a spread checkpoint before copying: it lasts up to 4 min 30 s "
                    "(checkpoint_completion_target 0.9 x checkpoint_timeout 5 min 00 s), about "
                    "4 min 00 s left; next time --checkpoint=fast, or run CHECKPOINT now (a "
                    "superuser) to end it at once if an I/O burst is acceptable")
    doc: Any = wait_doc("start", ck, None)
    assert doc["on"] == "checkpoint" and doc["left_s"] == 240.0
    late = _snap(1.0, 1, _name(1), 2 * SEG, server_ts=1300.0)
    past = ww.checkpoint(late, _session(1000.0), fast=False)
    assert past["past_bound"] and past["left_s"] == 0.0
    assert "past its bound of 4 min 30 s" in checkpoint_text(past, "x")
    assert wait_doc("start", past, None)["left_s"] is None  # type: ignore[index]
    assert wait_reason(wait_doc("start", past, None)) == \
        "waiting for the checkpoint: past its bound"
    fast = ww.checkpoint(snap, _session(1000.0), fast=True)
    assert fast["bound_s"] is None and "writes out every dirty buffer" in \
        checkpoint_text(fast, "x")
    # a fast checkpoint behind a backlog: the archiver's time counts
    ww.aim("start", fixed=True)
    both = wait_doc("start", fast, {"left_s": 12.0})
    assert both is not None and both["left_s"] == 12.0


def test_a_command_held_then_going_on_is_timed_from_its_first_segment() -> None:
    """archive_command hung for 8 s on a segment, then went on at 2 a
    second: its pace is 2, not diluted by the time it hung."""
    ww = WalWatch()
    for i in range(9):
        ww.observe(_snap(float(i), 5, _name(5), 40 * SEG))
    assert ww.pace() == (None, "measuring")  # not yet 10 s: not "stuck" either
    for j in range(1, 5):
        ww.observe(_snap(8.0 + j, 5 + 2 * j, _name(5 + 2 * j), 40 * SEG))
    rate, how = ww.pace()
    assert how == "measured" and rate == 2.0


def test_a_tool_that_looks_ever_less_often_sees_the_segment_late() -> None:
    """pgBackRest looks for the segment at 0 s, then after sleeps of 0.1,
    0.1, 0.2, 0.3, 0.5 s... (each the sum of the two before; src/common/
    wait.c): after a minute's wait its next look is 38 s later. Each sleep
    is cut to what is left of its archive-timeout, at which it looks a last
    time; past it, it gives up."""
    looks = [0.0, 0.1, 0.2, 0.4, 0.7, 1.2, 2.0, 3.3, 5.4, 8.8, 14.3, 23.2, 37.6, 60.9, 98.6]
    for at in looks:
        assert next_look(at) == pytest.approx(at)
        assert next_look(at + 0.01) == pytest.approx(looks[looks.index(at) + 1]) \
            if at < 98.6 else True
    assert next_look(0.05) == pytest.approx(0.1) and next_look(0.15) == pytest.approx(0.2)
    # its archive-timeout (60 s): the sleep after 37.6 s is cut to 22.4 s
    assert next_look(37.7, limit=60.0) == pytest.approx(60.0)
    assert next_look(60.0, limit=60.0) == pytest.approx(60.0)
    assert next_look(60.1, limit=60.0) is None
    assert next_look(9.0, limit=60.0) == pytest.approx(14.3)
    assert next_look(4.0, limit=5.0) == pytest.approx(5.0)  # 3.3, then 5.4 cut to 5.0


def _behind() -> WalWatch:
    """The archiver 20 segments behind the start's segment at 2 a second
    (archived 10 s from now, server time 1003)."""
    ww = WalWatch()
    for i in range(4):
        ww.observe(_snap(float(i), 2 * i, _name(2 * i), 27 * SEG, server_ts=1000.0 + i))
    ww.aim("start", fixed=True)
    return ww


def test_when_the_tool_sees_the_segment_it_waits_for() -> None:
    """It has looked for 5 s: it looks again at 8.8 s and 14.3 s from its
    start (too early: archived at 15 s), then at 23.2 s, 18.2 s from now;
    the ETA counts that. Once archived (at 1010 by the archiver's clock), it
    sees it at its next look after that: 14.3 s from its start."""
    ww = _behind()
    a = ww.archiving("start")
    assert a is not None and a["segments"] == 20 and a["left_s"] == 10.0
    assert ww.ready_at("start") == pytest.approx(1013.0)
    assert ww.polled("start", since=998.0) == pytest.approx(18.2)
    assert not ww.gives_up("start", 998.0, 60.0)
    # an archive-timeout of 14 s runs out at 1012, before the segment is archived (1013)
    assert ww.polled("start", since=998.0, limit=14.0) is None
    assert ww.gives_up("start", 998.0, 14.0)
    assert ww.polled("start", since=None) is None and not ww.gives_up("start", None, 60.0)
    doc = wait_doc("start", None, {**a, "seen_in_s": 18.2})
    assert doc is not None and doc["left_s"] == 18.2  # not 10.0: it sees it later
    assert wait_doc("start", None, {**a, "seen_in_s": None})["left_s"] == 10.0  # type: ignore[index]
    # archived at 1010 by the archiver's clock (pg_stat_archiver's last_archived_time)
    ww.observe(Snapshot(ts=10.0, wall=0.0, host=None, db=DbSample(
        server_ts=1011.0, archiver=(26, 0, None, None, 1010.0, _name(26)),
        wal=(27 * SEG, SEG, 300.0, 0.9))))
    a = ww.archiving("start")
    assert a is not None and a["segments"] == 0 and a["left_s"] == 0.0
    assert ww.ready_at("start") == 1010.0
    assert ww.polled("start", since=998.0) == pytest.approx(998.0 + 14.3 - 1011.0)
    # the archiver goes on past it: when it was archived stays as first seen
    ww.observe(Snapshot(ts=11.0, wall=0.0, host=None, db=DbSample(
        server_ts=1012.0, archiver=(27, 0, None, None, 1011.5, _name(27)),
        wal=(28 * SEG, SEG, 300.0, 0.9))))
    assert ww.ready_at("start") == 1010.0
    assert ww.polled("start", since=998.0) == pytest.approx(998.0 + 14.3 - 1012.0)
    # a look of its since 1010 (at 8.8 s from 1001.2): it has seen it; its
    # next statement is not run yet: 0
    assert ww.polled("start", since=1001.2) == 0.0


def test_already_past_it_at_the_first_look_counts_from_that_look() -> None:
    """The archiver already past the segment when first seen: when it was
    archived is not known; the first look's time is the latest it can be."""
    ww = WalWatch()
    ww.observe(Snapshot(ts=0.0, wall=0.0, host=None, db=DbSample(
        server_ts=500.0, archiver=(9, 0, None, None, 499.0, _name(9)),
        wal=(10 * SEG, SEG, 300.0, 0.9))))
    ww.aim("start", fixed=True, ahead=-2)  # the segment waited for: 7
    assert ww.archiving("start")["segments"] == 0  # type: ignore[index]
    assert ww.ready_at("start") == 500.0
    ww.observe(Snapshot(ts=1.0, wall=0.0, host=None, db=DbSample(
        server_ts=501.0, archiver=(10, 0, None, None, 500.5, _name(10)),
        wal=(11 * SEG, SEG, 300.0, 0.9))))
    assert ww.ready_at("start") == 500.0
    # no pace yet and not archived: not known
    assert _behind().ready_at("stop") is None


def test_a_segment_the_tool_names_settles_the_wait() -> None:
    """pgBackRest's manifest names the stop's segment: the wait is for it,
    whatever was aimed at before; behind until the archiver has it."""
    ww = WalWatch()
    ww.observe(_snap(0.0, 5, _name(5), 12 * SEG))
    assert not ww.behind("stop")  # nothing aimed at
    ww.aim("stop", fixed=False, ahead=1)
    assert ww.waits["stop"]["segno"] == 12 and not ww.behind("stop")  # not settled
    ww.aim("stop", fixed=True, segno=9)
    assert ww.behind("stop") and ww.archiving("stop")["segments"] == 4  # type: ignore[index]
    assert ww.archiving("stop")["wal"] == _name(9)  # type: ignore[index]
    ww.aim("stop", fixed=True)  # settled: the WAL written since does not move it
    ww.observe(_snap(1.0, 9, _name(9), 14 * SEG))
    assert ww.waits["stop"]["segno"] == 9 and not ww.behind("stop")
