"""The calibration probe: total throughput X(k) with k parallel streams, on
the real system, the way ``pg_dump -Fd -j k`` (`run_probe`) or
``pg_restore -j k`` (`run_restore_probe`) moves data (docs/advise.md,
"Evidence sources" 1).

Modules, each one concern:

* `results`: what a probe returns (ProbeResult, ProbePoint), the tables it
  may read (ProbeTable) and its error (ProbeError);
* `compress`: the compressor CLI that stands in for pg_dump's compression;
* `psql`: which psql, its command line and its environment (no connection
  setting on a command line), and the message of a psql that failed;
* `streams`: one long psql session per stream, fed range after range;
* `steps`: one step of k streams, measured; `plan`: the steps within the
  budget (warm-up, 1, 2, 4, ... streams, a point between the last two);
* `dump`: the dump probe (TID range scans of the largest tables);
* `restore_ranges` and `restore`: the restore probe (the archive's data
  files into temporary tables, and one index build).

The names other modules use are re-exported here.
"""

from __future__ import annotations

from .compress import ZLIB_FILTER, Compressor, compressor
from .dump import MIN_SERVER_VERSION, copy_sql, run_probe
from .plan import stream_plan
from .psql import APP_NAME, find_psql, psql_argv, psql_env
from .restore import (
    INDEX_SHARE,
    archive_index_sql,
    restore_probe_inputs,
    run_restore_probe,
)
from .restore_ranges import (
    INDEX_MIN_HEAP,
    TRUNCATE_AFTER_BYTES,
    index_on_temp,
    temp_table_sql,
)
from .results import GB, ProbeError, ProbePoint, ProbeResult, ProbeTable, qualified_name

__all__ = [
    "APP_NAME", "GB", "INDEX_MIN_HEAP", "INDEX_SHARE", "MIN_SERVER_VERSION",
    "TRUNCATE_AFTER_BYTES", "ZLIB_FILTER", "Compressor", "ProbeError", "ProbePoint",
    "ProbeResult", "ProbeTable", "archive_index_sql", "compressor", "copy_sql", "find_psql",
    "index_on_temp", "psql_argv", "psql_env", "qualified_name", "restore_probe_inputs",
    "run_probe", "run_restore_probe", "stream_plan", "temp_table_sql",
]
