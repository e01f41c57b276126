"""pgBackRest restore: a main process and, with process-max N, N local
processes (`restore:local`) that read the backup's files from the repository,
decompress them, check them and write them into the data directory. It runs
while the server is down, so nothing of it is in any server view: it is
followed from the host alone (`attach --host-only`, or found on its own when
no server answers).

- The total: the backup's manifest (`backup.manifest` in the repository, the
  size of every file it restores), read once.
- Done: a plain restore writes into an empty data directory, so what its
  files hold now is what was restored (walked at most every few seconds on a
  large cluster: the walk's cost is kept under 2% of the time). A `--delta`
  restore checks the files in place and rewrites only those that differ:
  there the data directory says nothing, and progress is inferred from
  pgBackRest's order (largest files first) and the files its processes are
  on now.
- Each local process: the file it writes now (its position of the
  manifest's size), its write rate and its CPU (decompression, checksums).
- The end: pgBackRest writes global/pg_control last, so that an interrupted
  restore cannot be started: present once the processes are gone, the
  restore completed.
"""

from __future__ import annotations

import configparser
import glob
import json
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..analyze.bottleneck import BUSY_CPU, HOST_CPU, Verdict
from ..analyze.eta import Eta
from ..analyze.items import Item, WorkerState
from ..cmdline import ClientArgs
from ..phases import Phase
from ..snapshot import Backend, ClientProc, Snapshot
from .backup_phases import BACKUP_ITEM, STARTING
from .base import TREE, Driver, EndContext, Job, state_of
from .backup_rows import ProcessRows, how_far, process_row, prune_rows, window_eta
from .grouping import tree_member_pids
from .pgbackrest_repo import command_of, option

if TYPE_CHECKING:
    from ..analyze.progress import Tracker
    from ..client_tree import ClientPids
    from ..readers.procs import ProcInfo

KEY = "pgbackrest-restore"
RATE_WINDOW_S = 30.0  # the ETA's rate: the copy's last seconds
WALK_SHARE = 0.02  # the data directory's walk: at most this share of the time
DEFAULT_CONFIGS = ("/etc/pgbackrest/pgbackrest.conf", "/etc/pgbackrest.conf")
DELTA_FLAGS = ("--delta", "--force")

# the rows of its local processes writing the data directory, and the end
# (pg_control, the sync) after their copy
RESTORE = Phase("restore", 110, busy=True, streams=True,
                tui=("black on green", "black on bright_green"), fill="#52b788")
FINISHING = Phase("finishing", 140, busy=True, waits=True,
                  tui=("black on grey70", "black on white"), fill="#adb5bd")
# what read_status says that the driver's state keeps (the same names)
_FROM_TOOL = ("pgdata", "label", "total", "file_count", "written", "pg_control", "delta",
              "repo_stanza_dir", "queue_done")


@dataclass
class RestoreState:
    """What the restore driver keeps about one restore (its new_state)."""

    rows: ProcessRows = field(default_factory=ProcessRows)  # its local processes
    # from its status (read_status, recorded): the data directory, the
    # backup set, the manifest's total and files, the bytes in the data
    # directory, whether pg_control is there, a delta restore and how far
    # its queue is done
    pgdata: str | None = None
    label: str | None = None
    total: int | None = None
    file_count: int | None = None
    written: int | None = None
    pg_control: bool | None = None
    delta: bool | None = None
    repo_stanza_dir: str | None = None
    queue_done: float | None = None
    phase: str | None = None  # starting | restore | finishing
    basis: str | None = None  # what its progress counts: "queue" or "written"
    # (ts, done, work) over the copy's last seconds: the ETA's rate
    hist: list[tuple[float, float, float]] = field(default_factory=list)
    copied: bool = False  # its local processes were seen writing


class PgBackRestRestore(Driver):
    kind = "pgbackrest-restore"
    programs = ("pgbackrest",)
    title = "pgBackRest restore"  # no session: the server is down
    data_flow = "in"
    plans_work = False  # its total comes from the manifest, read with its status
    needs_plan = False
    fixed_workers = False
    whole_cluster = True
    host_only = True
    phases = (STARTING, RESTORE, FINISHING)
    item_kinds = (BACKUP_ITEM,)
    verdicts = ("client-cpu",)
    advice_terms = (("-j ", "process-max "), ("COPY", "file copy"))

    def new_state(self) -> RestoreState:
        return RestoreState()

    # ---- recognise ---------------------------------------------------------

    def from_tree(self, root: ProcInfo, args: ClientArgs) -> bool:
        return command_of(root.cmdline) == "restore"

    def refine(self, job: Job, linked: list[Backend]) -> Job:
        import dataclasses

        pmax = setting(job.command, "process-max", None)
        return dataclasses.replace(job, database=None, grouping=TREE,
                                   target=setting(job.command, "pg1-path", None),
                                   jobs=int(pmax) if pmax and pmax.isdigit() else 1)

    def session_key(self, b: Backend) -> tuple[object, ...] | None:
        return None  # it has no session: the server is down

    def belongs(self, job: Job, b: Backend) -> bool:
        return False

    def member_pids(self, job: Job, snap: Snapshot, clients: ClientPids) -> set[int] | None:
        return tree_member_pids(job, snap, clients)

    # ---- the tool's own status (live) ----------------------------------------

    def read_status(self, job: Job, clients: tuple[ClientProc, ...],
                    prev: dict[str, Any] | None) -> dict[str, Any] | None:
        """What the host says of the restore: the data directory and the
        repository (from its options, its configuration or its open files),
        the manifest's files (once), and, for a plain restore, the bytes in
        the data directory now."""
        prev = prev or {}
        out = dict(prev)
        opened = [f.path for c in clients for f in c.open_files or ()]
        stanza = setting(job.command, "stanza", None)
        mark = f"/backup/{stanza}/" if stanza else "/backup/"
        labels = set(prev.get("labels") or ())
        for p in opened:
            i, j = p.find(mark), p.find("/pg_data/")
            if i > 0 and j > i:
                out.setdefault("repo_stanza_dir", p[:i + len(mark) - 1])
                labels.add(p[i + len(mark):j])
        out["labels"] = sorted(labels)
        pgdata = out.get("pgdata") or job.target or _pgdata_from_files(opened)
        out["pgdata"] = pgdata
        if not out.get("repo_stanza_dir"):
            repo = setting(job.command, "repo1-path", None)
            if repo and stanza:
                out["repo_stanza_dir"] = os.path.join(repo, "backup", stanza)
        label = _label(job, out)
        if label and label != prev.get("label") and out.get("repo_stanza_dir"):
            manifest = read_manifest(os.path.join(out["repo_stanza_dir"], label,
                                                  "backup.manifest"))
            if manifest is not None:
                out.update(label=label, total=sum(manifest.values()), file_count=len(manifest))
                _MANIFESTS[label] = manifest
        files = _MANIFESTS.get(out.get("label") or "") or {}
        # the files in flight and their manifest sizes (recorded: a replay
        # needs no repository)
        inflight = {}
        for p in opened:
            if pgdata and p.startswith(pgdata.rstrip("/") + "/"):
                name = "pg_data/" + p[len(pgdata.rstrip("/")) + 1:]
                if name in files:
                    inflight[name] = files[name]
        out["inflight"] = inflight
        out["delta"] = any(a in DELTA_FLAGS for a in job.command) or \
            (setting(job.command, "delta", "n") or "n").lower() in ("y", "yes")
        if out["delta"]:
            out["queue_done"] = (_queue_done(files, [(n, k) for k, n in inflight.items()])
                                 if inflight else prev.get("queue_done"))
        elif pgdata:
            # bytes each local process wrote (a process that exited keeps
            # its last count: the sum never goes back)
            wc = dict(prev.get("wc") or {})
            wc.update({str(c.pid): c.write_chars for c in clients
                       if c.pid != job.client_pid and c.write_chars is not None})
            out.update(wc=wc, wc_sum=sum(wc.values()))
            now = time.monotonic()
            copying = any(c.pid != job.client_pid for c in clients)
            # walked again at once when the copy is over: the end's figure
            if now >= (prev.get("walk_next") or 0.0) or not copying:
                written = data_bytes(pgdata)
                out["walk_next"] = now + (time.monotonic() - now) / WALK_SHARE
                if written is not None:
                    # what the processes wrote until now: between two walks,
                    # what they write since is added to it
                    out.update(written=written, wchars=out["wc_sum"])
        if pgdata:
            out["pg_control"] = os.path.exists(os.path.join(pgdata, "global", "pg_control"))
        return out

    # ---- observe -----------------------------------------------------------

    def file_evidence(self, tr: Tracker, snap: Snapshot, running_now: dict[str, int]) -> None:
        st = _st(tr)
        tool = snap.tool or {}
        it = tr.items.get(KEY)
        if it is None:
            it = Item(key=KEY, kind=BACKUP_ITEM.name, relation=None, name="restore", size=1.0,
                      work=1.0, state="running", started=snap.wall)
            tr.add(it)
        for k in _FROM_TOOL:
            if k in tool:
                setattr(st, k, tool[k])
        if st.label:
            it.name = f"restore of {st.label}"
        inflight = self._local_processes(tr, st, snap, tool.get("inflight") or {})
        st.phase = _phase(tr, st, snap)
        if it.state == "done":
            return
        total = st.total
        if not total:
            return
        if it.work != total:
            it.work = it.size = float(total)
            it.done = 0.0
        done: float | None
        if st.delta:
            q = st.queue_done
            done = q + inflight if q is not None else None
            st.basis = "queue"
        else:
            done = st.written
            if done is not None and tool.get("wchars") is not None:
                done += max(0, (tool.get("wc_sum") or 0) - tool["wchars"])
            st.basis = "written"
        if done is None:
            return
        it.done = max(it.done, min(0.999 * it.work, float(done)))
        it.bytes_done = int(it.done)
        if st.phase == "restore":
            hist = st.hist
            hist.append((snap.ts, it.done, it.work))
            while len(hist) > 2 and hist[-1][0] - hist[0][0] > RATE_WINDOW_S:
                del hist[0]

    def _local_processes(self, tr: Tracker, st: RestoreState, snap: Snapshot,
                         sizes: dict[str, int]) -> float:
        """Each local process writing a file into the data directory is a
        worker row. Returns the bytes written of the files in flight."""
        pgdata = (st.pgdata or "").rstrip("/")
        procs = st.rows.procs
        inflight = 0.0
        active: set[int] = set()
        for c in snap.clients:
            if c.pid == tr.job.client_pid:
                continue
            prev_cpu = st.rows.cpu.get(c.pid)
            if c.cpu_s is not None:
                st.rows.cpu[c.pid] = (snap.ts, c.cpu_s)
            writing = [f for f in c.open_files or ()
                       if pgdata and f.path.startswith(pgdata + "/")]
            if not writing:
                continue
            f = writing[-1]
            name = "pg_data/" + f.path[len(pgdata) + 1:]
            size = sizes.get(name)
            active.add(c.pid)
            w = procs.setdefault(c.pid, WorkerState(pid=c.pid, client_pid=c.pid))
            w.phase, w.state, w.wait_event = "restore", "active", None
            w.relation = name[len("pg_data/"):]
            w.progress = min(1.0, f.position / size) if size else None
            inflight += min(f.position, size) if size else f.position
            process_row(st.rows, w, c, snap, prev_cpu, c.write_chars)
        prune_rows(tr, st.rows, active)
        if active:
            st.copied = True
        return inflight

    def done_when_unseen(self, tr: Tracker, it: Item, snap: Snapshot, sessions: set[int]) -> bool:
        return it.key != KEY

    def between_steps(self, tr: Tracker) -> bool:
        return _st(tr).phase != "restore"

    def fraction(self, tr: Tracker) -> float | None:
        it = tr.items.get(KEY)
        if it is None or (not _st(tr).total and it.state != "done"):
            return None
        return it.fraction

    def has_total(self, tr: Tracker) -> bool:
        return bool(_st(tr).total)

    def streams(self, tr: Tracker) -> int | None:
        return None

    def own_eta(self, tr: Tracker) -> Eta | None:
        st = _st(tr)
        phase = st.phase
        if phase == "starting":
            return Eta(None, reason="starting: reading the manifest, cleaning and building the "
                                    "directory")
        if phase == "finishing":
            return Eta(None, reason="finishing: recovery settings, pg_control, sync")
        if not st.total:
            return Eta(None, reason="total unknown: the backup's manifest cannot be read here "
                                    "(an encrypted or remote repository)")
        left, why = window_eta(tr.items.get(KEY), st.hist)
        return Eta(left, reason=why)

    def job_fields(self, tr: Tracker, workers: list[dict[str, Any]],
                   state: str) -> dict[str, Any]:
        st = _st(tr)
        names = {"starting": "starting (manifest, directories)", "restore": "restoring files",
                 "finishing": "finishing (recovery settings, pg_control, sync)"}
        if not st.total:
            basis = "none: the backup's manifest cannot be read here"
        elif st.basis == "queue":
            basis = ("inferred: a delta restore, from pgBackRest's order (largest files "
                     "first) and the files its processes write now, of the manifest's total")
        else:
            basis = "the data directory's files now, of the manifest's total"
        return {
            "phase": names.get(st.phase or "", st.phase) if state == "running" else None,
            "progress_basis": basis, "scope": "cluster", "host_only": True,
            "backup": {
                "tool": "pgbackrest", "command": "restore",
                "stanza": setting(tr.job.command, "stanza", None),
                "set": st.label, "delta": bool(st.delta),
                "process_max": tr.job.jobs,
                "processes_copying": len(st.rows.active),
                "total_bytes": st.total, "files_total": st.file_count,
                "written_bytes": st.written, "data_directory": st.pgdata,
                "pg_control_written": st.pg_control,
            }}

    def verdict(self, tr: Tracker, snap: Snapshot, settings: dict[str, str]) -> Verdict | None:
        st = _st(tr)
        if st.phase != "restore":
            return None
        cpus = list(st.rows.cpu_pct.values())
        host = getattr(getattr(snap, "host", None), "cpu_percent", None)
        if cpus and sum(cpus) / len(cpus) >= BUSY_CPU:
            more = ("the host's CPUs are busy too: more processes will not help"
                    if host is not None and host >= HOST_CPU else
                    "more process-max helps while cores are free")
            return Verdict("client-cpu", f"pgBackRest's {len(cpus)} process(es) at "
                           f"{sum(cpus) / len(cpus):.0f}% of a core each: decompression and "
                           f"checksums are the limit; {more}")
        return None

    # ---- outcome -----------------------------------------------------------

    def settle_at_end(self, tr: Tracker, ctx: EndContext, snap: Snapshot) -> bool | None:
        st = _st(tr)
        it = tr.items.get(KEY)
        if it is not None and it.state != "done" and st.pg_control:
            tr.finish(it, snap.wall)
            if st.total:
                it.bytes_done = int(it.work)
        return None

    def cut_short(self, tr: Tracker, snap: Snapshot) -> str | None:
        st = _st(tr)
        it = tr.items.get(KEY)
        if it is None or it.state == "done" or st.pg_control:
            return None
        if not st.pgdata:
            return "the restore stopped before its data directory was seen"
        return (f"the restore stopped {_how_far(tr, st)}: global/pg_control was not written, "
                "so this data directory cannot be started; run the restore again (--delta "
                "keeps the files already restored)")

    def leftover_verdict(self, tr: Tracker, left: list[Item]) -> tuple[str, str]:
        st = _st(tr)
        return "ended", (f"pgBackRest's processes are gone ({_how_far(tr, st)}); whether "
                         "the restore completed cannot be seen here (its data directory is "
                         "not readable by this user)")

    def exit_reason(self, code: int) -> str:
        return f"pgbackrest exit code {code}"


# the manifests read, by backup label: file name -> size (kept out of the
# recorded status, which carries only their totals)
_MANIFESTS: dict[str, dict[str, int]] = {}


def setting(argv: list[str] | tuple[str, ...], name: str, default: str | None,
            environ: dict[str, str] | None = None) -> str | None:
    """A pgBackRest option as pgBackRest resolves it: its command line, then
    PGBACKREST_* in the environment, then its configuration file (the
    stanza's `:restore` and plain sections, then the global ones)."""
    v = option(argv, name)
    if v is not None:
        return v
    env = os.environ if environ is None else environ
    e = env.get("PGBACKREST_" + name.upper().replace("-", "_"))
    if e is not None:
        return e
    stanza = option(argv, "stanza") or env.get("PGBACKREST_STANZA")
    cfg = _config(option(argv, "config") or env.get("PGBACKREST_CONFIG"),
                  option(argv, "config-include-path")
                  or env.get("PGBACKREST_CONFIG_INCLUDE_PATH"))
    cmd = command_of(argv) or "restore"
    for section in ([f"{stanza}:{cmd}", stanza] if stanza else []) + [f"global:{cmd}",
                                                                        "global"]:
        if cfg.has_section(section) and cfg.has_option(section, name):
            return cfg.get(section, name)
    return default


def _config(path: str | None, include: str | None) -> configparser.RawConfigParser:
    cfg = configparser.RawConfigParser(strict=False, interpolation=None)
    cfg.optionxform = str  # type: ignore[assignment, method-assign]
    paths = [path] if path else [p for p in DEFAULT_CONFIGS if os.path.exists(p)][:1]
    paths += sorted(glob.glob(os.path.join(include or "/etc/pgbackrest/conf.d", "*.conf")))
    for p in paths:
        try:
            cfg.read(p, encoding="utf-8")
        except (OSError, configparser.Error):
            continue
    return cfg


def read_manifest(path: str) -> dict[str, int] | None:
    """Every file a backup's manifest lists and its size; None when it
    cannot be read (another user's repository, an encrypted one)."""
    files: dict[str, int] = {}
    section = None
    try:
        with open(path, encoding="utf-8", errors="strict") as f:
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("["):
                    section = line.strip("[]")
                    continue
                if section != "target:file" or "=" not in line:
                    continue
                name, _, value = line.partition("={")
                try:
                    meta = json.loads("{" + value)
                except ValueError:
                    continue
                files[name] = int(meta.get("size") or 0)
    except (OSError, UnicodeDecodeError):
        return None
    return files or None


def data_bytes(pgdata: str) -> int | None:
    """The bytes in a data directory's files now (tablespaces through their
    links under pg_tblspc)."""
    total = 0
    try:
        for root, _dirs, names in os.walk(pgdata, followlinks=True):
            for n in names:
                try:
                    total += os.lstat(os.path.join(root, n)).st_size
                except OSError:
                    continue
    except OSError:
        return None
    return total


def _label(job: Job, st: dict[str, Any]) -> str | None:
    """The backup being restored: --set, else the newest the processes read
    from (a differential reads its full's files too), else `latest`."""
    given = setting(job.command, "set", None)
    if given and given != "latest":
        return given
    labels = st.get("labels") or []
    if labels:
        return str(max(labels))
    d = st.get("repo_stanza_dir")
    if d:
        try:
            return os.path.basename(os.path.realpath(os.path.join(d, "latest")))
        except OSError:
            return None
    return None


def _pgdata_from_files(opened: list[str]) -> str | None:
    """The data directory from a file a local process writes: the part
    before a relation's path (base/…, global/…)."""
    for p in opened:
        if "/backup/" in p:
            continue
        for marker in ("/base/", "/global/"):
            i = p.find(marker)
            if i > 0:
                return p[:i]
    return None


def _queue_done(files: dict[str, int], inflight: list[tuple[int, str]]) -> float:
    """A delta restore: pgBackRest works its queue largest file first (then
    by name, last first): every file ahead of the last one in flight is
    done, less those still in flight."""
    last = min(inflight)
    now = {n for _, n in inflight}
    return float(sum(size for name, size in files.items()
                     if (size, name) > last and name not in now))


def _st(tr: Tracker) -> RestoreState:
    return state_of(tr, RestoreState)


def _phase(tr: Tracker, st: RestoreState, snap: Snapshot) -> str:
    if st.rows.active:
        return "restore"
    return "finishing" if st.copied else "starting"


def _how_far(tr: Tracker, st: RestoreState) -> str:
    return how_far(tr.items.get(KEY), bool(st.total), st.phase)
