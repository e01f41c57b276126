"""pg_basebackup's command line: -D is `file` ("-": to standard output),
-F `format` (plain | tar), -Z/-z `compression`, -r the rate limit, -X the
WAL method, -c the checkpoint."""

from __future__ import annotations

from ..cmdline import CONN, ClientSpec, Opts, args, choices, flags

_OPTIONS: Opts = {
    **CONN, "D": ("file", True), "F": ("format", True), "r": ("max-rate", True),
    "R": ("write-recovery-conf", False), "T": ("tablespace-mapping", True),
    "X": ("wal-method", True), "z": ("gzip", False), "Z": ("compress", True),
    "c": ("checkpoint", True), "C": ("create-slot", False), "l": ("label", True),
    "n": ("no-clean", False), "N": ("no-sync", False), "P": ("progress", False),
    "S": ("slot", True), "s": ("status-interval", True), "t": ("target", True),
    "i": ("incremental", True),
    "pgdata": ("file", True), "format": ("format", True), "max-rate": ("max-rate", True),
    "wal-method": ("wal-method", True), "compress": ("compress", True),
    "checkpoint": ("checkpoint", True), "gzip": ("gzip", False),
    **args("tablespace-mapping", "waldir", "label", "slot", "status-interval", "target",
           "incremental", "manifest-checksums", "sync-method"),
    **flags("write-recovery-conf", "create-slot", "no-clean", "no-sync", "progress",
            "no-estimate-size", "no-manifest", "no-slot", "no-verify-checksums",
            "manifest-force-encode"),
}

_FORMATS = {"p": "plain", "plain": "plain", "t": "tar", "tar": "tar"}
_WAL_METHODS = {"n": "none", "none": "none", "f": "fetch", "fetch": "fetch",
                "s": "stream", "stream": "stream"}

CLIENT = ClientSpec(options=_OPTIONS, values={"format": choices(_FORMATS),
                                              "wal-method": choices(_WAL_METHODS,
                                                                    keep_unknown=True)})
