-- A logical sync's publisher, read once with its table sizes
-- (jobs/logical_sync.py): the settings that bound the walsenders and slots a
-- subscriber's sync workers need (each needs one of each), and the names of
-- those in use now (slots; walsenders by application_name). Statistics and
-- settings reads only.
SELECT json_build_object(
  'max_wal_senders', current_setting('max_wal_senders')::int,
  'max_replication_slots', current_setting('max_replication_slots')::int,
  'slots', (SELECT coalesce(json_agg(slot_name ORDER BY slot_name), '[]'::json)
            FROM pg_replication_slots),
  'walsenders', (SELECT coalesce(json_agg(application_name ORDER BY pid), '[]'::json)
                 FROM pg_stat_activity WHERE backend_type = 'walsender'))
