-- The sync slots of logical replication's initial sync (jobs/logical_sync_publisher.py),
-- read with every sample of a followed sync (Driver.follow_parts): on the
-- publisher a table's sync worker creates its slot first and drops it last
-- (14+: pg_<subscription oid>_sync_<relid>_<system id>, kept while a failed
-- sync waits to retry; before 14: a temporary <subscription>_<oid>_sync_<relid>).
-- Their names only: pg_replication_slots is readable by every role and
-- takes no lock.
SELECT coalesce(json_agg(slot_name ORDER BY slot_name), '[]'::json)
FROM pg_replication_slots
WHERE slot_type = 'logical' AND slot_name ~ '_sync_[0-9]+'
