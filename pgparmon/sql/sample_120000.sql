-- One sample, one round trip. No lock-taking function on any user table:
-- names come from pg_class rows (catalog reads take no relation lock), which
-- is why relation names resolve only in the database we are connected to.
-- Query text is kept only for the backends we may show (dump, restore, COPY,
-- and the index / constraint builds of the followed job's own sessions); for
-- the rest, only the command word (a secret may sit in someone's SQL).
-- The tools' sessions are told by their application_name: app_text (text
-- kept), app_idle (kept while idle) and app_repl (walsenders sampled) are
-- regexes the drivers declare (Driver.session_apps, jobs.registry.sample_apps),
-- bound parameters; NULL where no driver names one (~ NULL matches nothing).
SELECT json_build_object(
  'now', extract(epoch FROM clock_timestamp())::float8,
  'activity', (SELECT coalesce(json_agg(json_build_array(
        a.pid, a.datname, a.usename, a.application_name, host(a.client_addr), a.client_port,
        extract(epoch FROM a.backend_start)::float8, extract(epoch FROM a.xact_start)::float8,
        extract(epoch FROM a.query_start)::float8, a.state, a.wait_event_type, a.wait_event,
        a.backend_type, a.backend_xmin::text, NULL::int,  -- leader_pid arrived in 13
        CASE WHEN a.application_name ~ %(app_text)s::text OR a.query ~* '^\s*copy\s'
               OR a.backend_type = 'walsender'
               OR (a.pid = ANY(%(pids)s::int[])
                   AND (a.query ~* '^\s*(create\s+(unique\s+)?index|alter\s+table|vacuum|analyze)(\s|;|$)'
                        -- a backup tool's start and stop (pg_probackup names no application)
                        OR a.query ~* 'pg_(backup_(start|stop)|(start|stop)_backup)\s*\('))
             THEN left(a.query, 2000)
             ELSE split_part(ltrim(a.query), ' ', 1) END,
        CASE WHEN a.wait_event_type = 'Lock' THEN
             (SELECT array_agg(DISTINCT b) FROM unnest(pg_blocking_pids(a.pid)) b) END,
        CASE WHEN a.wait_event_type = 'Lock' THEN
             (SELECT json_build_array(l.locktype, l.mode, n.nspname || '.' || c.relname)
              FROM pg_locks l LEFT JOIN pg_class c ON c.oid = l.relation
              LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE l.pid = a.pid AND NOT l.granted LIMIT 1) END,
        extract(epoch FROM a.state_change)::float8
      ) ORDER BY a.pid), '[]'::json)
      FROM pg_stat_activity a
      WHERE a.pid <> pg_backend_pid()
        -- client sessions, and the replication connections of a base backup
        -- (a physical walsender has no database)
        AND (a.backend_type IN ('client backend', 'parallel worker')
             OR (a.backend_type = 'walsender' AND a.application_name ~ %(app_repl)s::text)
             -- a walsender running SQL's COPY (a logical walsender: a subscriber's
             -- table sync reads its table so, COPY ... TO STDOUT)
             OR (a.backend_type = 'walsender' AND a.query ~* '^\s*copy\s')
             -- server processes that work for a kind of job (Driver.backend_types:
             -- a subscription's sync workers)
             OR a.backend_type = ANY(%(types)s::text[]))
        -- idle sessions: a tool's own (app_idle), those whose last statement was a
        -- COPY (a load between batches), and the followed job's own (pids)
        AND (a.state IS DISTINCT FROM 'idle'
             OR a.application_name ~ %(app_idle)s::text
             OR a.query ~* '^\s*copy\s' OR a.pid = ANY(%(pids)s::int[]))
        AND (%(db)s::text IS NULL OR a.datname = %(db)s::text
             OR a.backend_type = 'walsender')),
  'copy', NULL,  -- pg_stat_progress_copy arrived in 14
  'index', (SELECT coalesce(json_agg(json_build_array(
        p.pid, p.datname, p.relid::int8, n.nspname || '.' || c.relname,
        p.index_relid::int8, ci.relname, p.command, p.phase, p.blocks_total, p.blocks_done,
        p.tuples_total, p.tuples_done)), '[]'::json)
      FROM pg_stat_progress_create_index p
      LEFT JOIN pg_class c ON c.oid = p.relid AND p.datname = current_database()
      LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_class ci ON ci.oid = p.index_relid AND p.datname = current_database()),
  'maint', (SELECT coalesce(json_agg(json_build_array(
        m.pid, m.datname, m.relid::int8, n.nspname || '.' || c.relname, m.command, m.phase,
        m.total, m.done)), '[]'::json)  -- pg_stat_progress_analyze arrived in 13
      FROM (
        SELECT p.pid, p.datname, p.relid, 'VACUUM'::text AS command, p.phase,
               p.heap_blks_total AS total, p.heap_blks_scanned AS done
        FROM pg_stat_progress_vacuum p) m
      LEFT JOIN pg_class c ON c.oid = m.relid AND m.datname = current_database()
      LEFT JOIN pg_namespace n ON n.oid = c.relnamespace),
  'bb', NULL,  -- pg_stat_progress_basebackup arrived in 13
  -- a base backup's WAL stream: bytes sent, and the slot that pairs it with
  -- its backup (pg_basebackup's temporary slot is named after that walsender)
  'repl', CASE WHEN %(backup)s THEN (SELECT coalesce(json_agg(json_build_array(
        r.pid, r.state, pg_wal_lsn_diff(r.sent_lsn, '0/0')::int8, s.slot_name)), '[]'::json)
      FROM pg_stat_replication r LEFT JOIN pg_replication_slots s ON s.active_pid = r.pid
      WHERE r.application_name ~ %(app_repl)s::text) END,
  -- WAL archiving: a backup that waits for its WAL to be archived waits on this
  -- (archived_count's pace is the archiver's rate; last_archived_wal where it is)
  'arch', CASE WHEN %(backup)s THEN (SELECT json_build_array(archived_count, failed_count, last_failed_wal,
        extract(epoch FROM last_failed_time)::float8,
        extract(epoch FROM last_archived_time)::float8, last_archived_wal) FROM pg_stat_archiver) END,
  -- where WAL is written (bytes), the segment size (10: in 8 kB pages), and
  -- the checkpoint's pacing (checkpoint_timeout s, checkpoint_completion_target):
  -- the segments between the archiver's last and a backup's own are its
  -- backlog; a spread checkpoint lasts up to the target x the timeout
  'wal', CASE WHEN %(backup)s THEN (SELECT json_build_array(
        pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
                             ELSE pg_current_wal_lsn() END, '0/0')::int8,
        max(CASE WHEN name = 'wal_segment_size'
                 THEN setting::int8 * CASE unit WHEN '8kB' THEN 8192 ELSE 1 END END),
        max(CASE WHEN name = 'checkpoint_timeout' THEN setting::float8 END),
        max(CASE WHEN name = 'checkpoint_completion_target' THEN setting::float8 END))
      FROM pg_settings WHERE name IN ('wal_segment_size', 'checkpoint_timeout',
                                      'checkpoint_completion_target')) END,
  -- replication slots and the WAL each keeps (a backup's WAL adds to it):
  -- name, type, active, wal_status (13+), bytes retained
  'slots', CASE WHEN %(backup)s THEN (SELECT coalesce(json_agg(json_build_array(
        s.slot_name, s.slot_type, s.active, NULL::text,
        pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn()
                             ELSE pg_current_wal_lsn() END, s.restart_lsn)::int8)), '[]'::json)
      FROM pg_replication_slots s WHERE s.restart_lsn IS NOT NULL) END,
  -- checkpoints so far: requested (WAL reached max_wal_size, or CHECKPOINT)
  -- and timed; a load that forces them is told to raise max_wal_size
  'ckpt', (SELECT json_build_array(checkpoints_req, checkpoints_timed) FROM pg_stat_bgwriter)
)
