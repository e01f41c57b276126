-- Static facts about the server and our session, read once per connection.
SELECT json_build_object(
  'version_num', current_setting('server_version_num')::int,
  'version', current_setting('server_version'),
  'database', current_database(),
  'user', current_user,
  'backend_pid', pg_backend_pid(),
  'backend_start', (SELECT extract(epoch FROM backend_start)::float8
                    FROM pg_stat_activity WHERE pid = pg_backend_pid()),
  'postmaster_start', extract(epoch FROM pg_postmaster_start_time())::float8,
  'settings', (SELECT json_object_agg(name, setting) FROM pg_settings
               WHERE name IN ('port', 'unix_socket_directories', 'data_directory',
                              'block_size', 'max_connections',
                              'superuser_reserved_connections', 'max_wal_size',
                              'maintenance_work_mem', 'listen_addresses',
                              'checkpoint_timeout', 'checkpoint_completion_target',
                              'archive_mode', 'data_checksums')),
  'is_superuser', (SELECT rolsuper FROM pg_roles WHERE rolname = current_user),
  'read_all_stats', pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'),
  'views', json_build_object(
     'copy', to_regclass('pg_catalog.pg_stat_progress_copy') IS NOT NULL,
     'create_index', to_regclass('pg_catalog.pg_stat_progress_create_index') IS NOT NULL)
)
