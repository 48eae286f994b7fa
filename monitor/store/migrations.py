"""The database schema, as ordered sqlite-utils migrations (never edit an applied one).

Sample tables are ``WITHOUT ROWID`` with the timestamp first in the primary key: rows are
stored in time order, so a time window is one range scan and retention is one range
delete, with no second index to store (half the bytes of a rowid table plus an index).
Timestamps are epoch milliseconds, UTC.
"""

from __future__ import annotations

from sqlite_utils import Database, Migrations

from monitor.store import rollups

migrations = Migrations("vramscope")

_DEVICE_COLUMNS = """
    used_bytes INTEGER, free_bytes INTEGER, reserved_bytes INTEGER, total_bytes INTEGER,
    vram_used_bytes INTEGER, vis_vram_used_bytes INTEGER, gtt_used_bytes INTEGER,
    gtt_ceiling_bytes INTEGER, util_pct REAL, temp_c REAL, power_w REAL,
    available_bytes INTEGER, shmem_bytes INTEGER, unevictable_bytes INTEGER,
    mlocked_bytes INTEGER, hugepages_free_bytes INTEGER, swap_free_bytes INTEGER
"""
_PROCESS_COLUMNS = """
    vram_bytes INTEGER, gtt_bytes INTEGER, cpu_bytes INTEGER,
    rss_anon_bytes INTEGER, rss_file_bytes INTEGER, rss_shmem_bytes INTEGER,
    swap_bytes INTEGER, hwm_bytes INTEGER, locked_bytes INTEGER, pss_bytes INTEGER
"""


@migrations()
def m001_initial(db: Database) -> None:
    _run(
        db,
        f"""
        CREATE TABLE devices (
            id TEXT PRIMARY KEY, collector TEXT NOT NULL, vendor TEXT NOT NULL, name TEXT,
            memory_kind TEXT NOT NULL, pci_bus_id TEXT, total_bytes INTEGER,
            vram_total_bytes INTEGER, vis_vram_total_bytes INTEGER, gtt_total_bytes INTEGER,
            hugepages_total_bytes INTEGER, swap_total_bytes INTEGER,
            first_seen_ms INTEGER NOT NULL, last_seen_ms INTEGER NOT NULL
        );
        CREATE TABLE device_samples (
            ts_ms INTEGER NOT NULL, device_id TEXT NOT NULL REFERENCES devices(id),
            {_DEVICE_COLUMNS},
            PRIMARY KEY (ts_ms, device_id)
        ) WITHOUT ROWID;
        CREATE TABLE processes (
            id INTEGER PRIMARY KEY, pid INTEGER NOT NULL, start_ticks INTEGER NOT NULL,
            started_at_ms INTEGER, ppid INTEGER, uid INTEGER, comm TEXT NOT NULL,
            argv TEXT NOT NULL, engine TEXT, reasons TEXT,
            first_seen_ms INTEGER NOT NULL, last_seen_ms INTEGER NOT NULL,
            exited_ms INTEGER,
            UNIQUE (pid, start_ticks, started_at_ms)
        );
        CREATE INDEX processes_last_seen ON processes (last_seen_ms);
        CREATE TABLE process_samples (
            ts_ms INTEGER NOT NULL, process_id INTEGER NOT NULL REFERENCES processes(id),
            device_id TEXT NOT NULL,
            {_PROCESS_COLUMNS},
            PRIMARY KEY (ts_ms, process_id, device_id)
        ) WITHOUT ROWID;
        CREATE TABLE device_minutes (
            ts_ms INTEGER NOT NULL, device_id TEXT NOT NULL, samples INTEGER NOT NULL,
            used_min_bytes INTEGER, used_avg_bytes INTEGER, used_max_bytes INTEGER,
            vram_used_avg_bytes INTEGER, vram_used_max_bytes INTEGER,
            gtt_used_avg_bytes INTEGER, gtt_used_max_bytes INTEGER,
            available_min_bytes INTEGER, available_avg_bytes INTEGER,
            shmem_max_bytes INTEGER, mlocked_max_bytes INTEGER, swap_free_min_bytes INTEGER,
            util_avg_pct REAL, util_max_pct REAL, temp_max_c REAL, power_avg_w REAL,
            power_max_w REAL,
            PRIMARY KEY (ts_ms, device_id)
        ) WITHOUT ROWID;
        CREATE TABLE process_minutes (
            ts_ms INTEGER NOT NULL, process_id INTEGER NOT NULL, device_id TEXT NOT NULL,
            samples INTEGER NOT NULL,
            vram_avg_bytes INTEGER, vram_max_bytes INTEGER,
            gtt_avg_bytes INTEGER, gtt_max_bytes INTEGER,
            vram_min_bytes INTEGER, gtt_min_bytes INTEGER, cpu_max_bytes INTEGER,
            rss_anon_avg_bytes INTEGER, rss_anon_max_bytes INTEGER,
            rss_file_avg_bytes INTEGER, rss_file_max_bytes INTEGER, rss_shmem_max_bytes INTEGER,
            swap_max_bytes INTEGER, hwm_max_bytes INTEGER, locked_max_bytes INTEGER,
            pss_max_bytes INTEGER,
            PRIMARY KEY (ts_ms, process_id, device_id)
        ) WITHOUT ROWID;
        CREATE TABLE events (
            id INTEGER PRIMARY KEY, ts_ms INTEGER NOT NULL, kind TEXT NOT NULL,
            severity TEXT NOT NULL, subject TEXT, message TEXT NOT NULL, data TEXT
        );
        CREATE INDEX events_ts ON events (ts_ms);
        CREATE TABLE collector_runs (
            ts_ms INTEGER NOT NULL, collector TEXT NOT NULL, duration_s REAL NOT NULL,
            cpu_s REAL NOT NULL, status TEXT NOT NULL, error TEXT,
            PRIMARY KEY (ts_ms, collector)
        ) WITHOUT ROWID;
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        """,
    )


def _run(db: Database, script: str) -> None:
    """Statements one by one: ``executescript`` would COMMIT the migration's transaction."""
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)


@migrations()
def m002_device_mig_mode(db: Database) -> None:
    """NVIDIA MIG mode, known per device (issue 3)."""
    db.table("devices").add_column("mig_enabled", int)


@migrations()
def m003_slot_usage(db: Database) -> None:
    """Tokens in use per llama-server slot, polled from /slots on loopback (issue 5)."""
    _run(
        db,
        """
        CREATE TABLE slot_usage (
            ts_ms INTEGER NOT NULL, model TEXT NOT NULL, slot_id INTEGER NOT NULL,
            tokens INTEGER NOT NULL, busy INTEGER NOT NULL, n_ctx INTEGER,
            PRIMARY KEY (ts_ms, model, slot_id)
        ) WITHOUT ROWID;
        CREATE INDEX slot_usage_model ON slot_usage (model, ts_ms)
    """,
    )


@migrations()
def m004_hidden_samples(db: Database) -> None:
    """Processes a device reports that we cannot see (NVML pids outside our PID namespace),
    with the bytes it reports for them, per tick (issue 16): the TUI's database source and
    ``--at`` show them as rows, counted as attributed, like a live sample."""
    _run(
        db,
        """
        CREATE TABLE hidden_samples (
            ts_ms INTEGER NOT NULL, pid INTEGER NOT NULL, device_id TEXT NOT NULL,
            used_bytes INTEGER, reason TEXT NOT NULL,
            PRIMARY KEY (ts_ms, pid, device_id)
        ) WITHOUT ROWID
    """,
    )


@migrations()
def m005_process_cwd(db: Database) -> None:
    """The working directory of each process (``/proc/PID/cwd``): relative model paths on
    its command line resolve against it (issue 16)."""
    db.table("processes").add_column("cwd", str)


@migrations()
def m006_exit_status(db: Database) -> None:
    """How each process ended (issue 19): its exit code or terminating signal, a core
    dump, the cause monitor/exits.py gave it and where the status came from."""
    for name, kind in (
        ("exit_code", int),
        ("exit_signal", int),
        ("core_dumped", int),
        ("exit_cause", str),
        ("exit_source", str),
    ):
        db.table("processes").add_column(name, kind)


@migrations()
def m007_estimates(db: Database) -> None:
    """What the daemon expects each server to hold (issue 15): one row per process and
    launch, written when it first sees the server and when its argv/cwd change
    (monitor/daemon/assessor.py), with the estimator's version. ``launch``, ``estimate``
    and ``findings`` are JSON (monitor/analysis/assess.py ``to_json``); ``total_bytes`` is
    the load-time total, NULL when the model cannot be estimated (``error`` says why)."""
    _run(
        db,
        """
        CREATE TABLE estimates (
            id INTEGER PRIMARY KEY,
            process_id INTEGER NOT NULL REFERENCES processes(id),
            ts_ms INTEGER NOT NULL, launch_key TEXT NOT NULL,
            estimator_version INTEGER NOT NULL, engine TEXT NOT NULL, model TEXT NOT NULL,
            total_bytes INTEGER, launch TEXT NOT NULL, estimate TEXT, findings TEXT,
            error TEXT
        );
        CREATE INDEX estimates_process ON estimates (process_id, ts_ms)
    """,
    )


@migrations()
def m008_memory_clock(db: Database) -> None:
    """Each device's memory clock per tick, MHz (issue 20): NVML, amdsmi or amdgpu
    pp_dpm_mclk (collectors/base.py ``DeviceSample.mem_clock_mhz``); NULL in older rows."""
    db.table("device_samples").add_column("mem_clock_mhz", float)


@migrations()
def m009_event_keys(db: Database) -> None:
    """A stable key per event a tick carries (issue 28): the hash of its content
    (monitor/store/database.py ``event_key``), unique where set, so a tick written twice
    (a backlog replayed again after a kill -9 in the middle of its replay) adds its events
    once. NULL for events added on their own (``add_event``) and for older rows."""
    db.table("events").add_column("event_key", str)
    _run(db, "CREATE UNIQUE INDEX events_key ON events (event_key) WHERE event_key IS NOT NULL")


@migrations()
def m010_process_cgroups(db: Database) -> None:
    """Each tracked server's binding memory cgroup per tick (issue 29.4): the path (as in
    /proc/PID/cgroup, collectors/cgroup.py: the one whose limit leaves the least room) with
    its limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``; NULL: none) and charge, so
    a post-mortem of a cgroup OOM kill names every member of the killed cgroup."""
    _run(
        db,
        """
        CREATE TABLE process_cgroups (
            ts_ms INTEGER NOT NULL, process_id INTEGER NOT NULL, path TEXT NOT NULL,
            max_bytes INTEGER, current_bytes INTEGER, reclaimable_bytes INTEGER,
            PRIMARY KEY (ts_ms, process_id)
        ) WITHOUT ROWID
    """,
    )


@migrations()
def m011_history_rollups(db: Database) -> None:
    """The history screen's rollups (issue 32, monitor/store/rollups.py): each inference
    server's measured total per minute, and 10-minute peaks of it and of each device's
    use, so a 30-day window reads ~4,000 rows a series instead of every process's
    per-minute row; backfilled from the per-minute rollups already kept."""
    _run(db, rollups.CREATE)
    row = db.execute("SELECT value FROM meta WHERE key = 'rolled_up_to_ms'").fetchone()
    if row is not None:
        rollups.roll_up(db.conn, 0, int(row[0]))


# Columns added to device_samples after m001, in migration order.
_ADDED_DEVICE_COLUMNS = ("mem_clock_mhz",)
DEVICE_SAMPLE_FIELDS = (
    *(line.split()[0] for chunk in _DEVICE_COLUMNS.split(",") if (line := chunk.strip())),
    *_ADDED_DEVICE_COLUMNS,
)
PROCESS_SAMPLE_FIELDS = tuple(
    line.split()[0] for chunk in _PROCESS_COLUMNS.split(",") if (line := chunk.strip())
)
