"""The TUI's widgets: each holds the little state it draws as reactive
attributes and renders from it; none computes rates or talks to the feed.

One widget a module (TextLines and AutoHeight are the bases the others draw
on); every name is re-exported here, so `from .widgets import X` keeps
working.
"""

from __future__ import annotations

from .text_lines import TextLines
from .job_header import JobHeader
from .event_log import EventLog
from .auto_height import AutoHeight
from .verdict_line import VerdictLine
from .status_line import StatusLine
from .advice_line import AdviceLine
from .throughput_chart import ThroughputChart
from .host_panel import HostPanel
from .gantt_chart import GanttChart
from .workers_table import SORTS, WorkersTable
from .summary_table import SummaryTable

__all__ = [
    "AdviceLine",
    "AutoHeight",
    "EventLog",
    "GanttChart",
    "HostPanel",
    "JobHeader",
    "SORTS",
    "StatusLine",
    "SummaryTable",
    "TextLines",
    "ThroughputChart",
    "VerdictLine",
    "WorkersTable",
]
