-- What the advice before a run needs beyond the static facts: connection
-- headroom, the shared lock table's size and use, and the settings a load
-- runs into. pg_settings, pg_stat_activity, pg_locks (a count, once),
-- pg_class and pg_largeobject_metadata (catalogs) only: no locks on user tables.
SELECT json_build_object(
  'connections_in_use', (SELECT count(*) FROM pg_stat_activity
                         WHERE backend_type = 'client backend'),
  'settings', (SELECT json_object_agg(name, json_build_array(setting, unit)) FROM pg_settings
               WHERE name IN ('max_connections', 'superuser_reserved_connections',
                              'reserved_connections', 'maintenance_work_mem', 'max_wal_size',
                              'archive_mode', 'wal_level', 'max_worker_processes',
                              'max_parallel_maintenance_workers', 'max_parallel_workers',
                              'min_parallel_table_scan_size', 'shared_buffers',
                              'block_size', 'data_directory', 'max_locks_per_transaction',
                              'max_prepared_transactions', 'autovacuum_max_workers',
                              'autovacuum_worker_slots', 'max_wal_senders',
                              'data_checksums')),
  -- lock table entries held now (fast-path locks live in each backend)
  'locks_in_use', (SELECT count(*) FROM pg_locks WHERE NOT fastpath),
  -- the relations pg_dump locks, each in its leader and in the worker that
  -- dumps it: tables and partitioned tables
  'lockable_tables', (SELECT count(*) FROM pg_class c
                      JOIN pg_namespace n ON n.oid = c.relnamespace
                      WHERE c.relkind IN ('r', 'p')
                        AND n.nspname NOT IN ('pg_catalog', 'information_schema')
                        AND n.nspname !~ '^pg_toast'),
  -- what a dump's leader reads, locks and writes the schema of, one by one
  'objects', (SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n
                      ON n.oid = c.relnamespace
                      WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
                        AND n.nspname !~ '^pg_toast' AND c.relkind <> 't')
                   + (SELECT count(*) FROM pg_constraint co JOIN pg_namespace n
                      ON n.oid = co.connamespace
                      WHERE n.nspname NOT IN ('pg_catalog', 'information_schema'))
                   + (SELECT count(*) FROM pg_proc p JOIN pg_namespace n
                      ON n.oid = p.pronamespace
                      WHERE n.nspname NOT IN ('pg_catalog', 'information_schema'))),
  -- checkpoints since the statistics were reset: requested ones (WAL reached
  -- max_wal_size, or a CHECKPOINT command) against timed ones
  'checkpoints', (SELECT json_build_object('requested', checkpoints_req,
                                           'timed', checkpoints_timed,
                                           'since', stats_reset::text)
                  FROM pg_stat_bgwriter),
  -- the database's large objects: how many (their metadata, a catalog
  -- scan) and the pages they fill (pg_class, as VACUUM or ANALYZE left it)
  'large_objects', (SELECT json_build_object(
                      'count', (SELECT count(*) FROM pg_largeobject_metadata),
                      'pages', c.relpages)
                    FROM pg_class c WHERE c.oid = 'pg_catalog.pg_largeobject'::regclass),
  'can_create_temp', has_database_privilege(current_database(), 'TEMPORARY'),
  'database_exists', true
)
