-- What the advice before a run needs beyond the static facts: connection
-- headroom and the settings a load runs into. pg_settings and
-- pg_stat_activity only: no relation locks.
SELECT json_build_object(
  'connections_in_use', (SELECT count(*) FROM pg_stat_activity
                         WHERE backend_type = 'client backend'),
  'settings', (SELECT json_object_agg(name, json_build_array(setting, unit)) FROM pg_settings
               WHERE name IN ('max_connections', 'superuser_reserved_connections',
                              'reserved_connections', 'maintenance_work_mem', 'max_wal_size',
                              'archive_mode', 'wal_level', 'max_worker_processes',
                              'max_parallel_maintenance_workers', 'shared_buffers',
                              'block_size', 'data_directory')),
  'can_create_temp', has_database_privilege(current_database(), 'TEMPORARY'),
  'database_exists', true
)
