-- Logical replication's initial sync, on a subscriber (jobs/logical_sync.py),
-- read with every sample: the subscriptions of every database (pg_subscription
-- is shared: subdbid), each with its workers (pg_stat_subscription is shared
-- too); for those of the connected database (pg_subscription_rel is not
-- shared) how many of its tables are ready, and while any is not, every
-- table's state in the order the apply worker starts their sync workers (pg_subscription_rel's heap order), the
-- settings that bound those workers and the replication origins that
-- exist (pg_replication_origin: every role may read it); its workers (pg_stat_subscription: relid
-- set for a table's sync worker) and its sync errors (15+). Catalog and
-- statistics reads only: no lock on a user table; only the pg_subscription
-- columns every role may read (not subconninfo).
SELECT coalesce(json_agg(json_build_object(
    'subid', s.oid::int8, 'name', s.subname, 'enabled', s.subenabled,
    -- another database's: its table states cannot be read from here (NULL)
    'datname', d.datname, 'here', d.datname = current_database(),
    'not_ready', CASE WHEN d.datname = current_database() THEN n.not_ready END,
    'ready', CASE WHEN d.datname = current_database() THEN n.ready END,
    'tables', CASE WHEN n.not_ready > 0 THEN (
        SELECT json_agg(json_build_array(r.srrelid::int8, ns.nspname || '.' || c.relname,
                                         r.srsubstate::text, r.srsublsn::text) ORDER BY r.ctid)
        FROM pg_subscription_rel r
        JOIN pg_class c ON c.oid = r.srrelid
        JOIN pg_namespace ns ON ns.oid = c.relnamespace
        WHERE r.srsubid = s.oid) END,
    'workers', (SELECT coalesce(json_agg(json_build_array(w.pid, w.relid::int8)), '[]'::json)
                FROM pg_stat_subscription w WHERE w.subid = s.oid AND w.pid IS NOT NULL),
    'sync_errors', st.sync_error_count,
    'settings', CASE WHEN n.not_ready > 0 THEN (
        SELECT json_object_agg(name, setting) FROM pg_settings
        WHERE name IN ('max_sync_workers_per_subscription', 'max_logical_replication_workers',
                       'max_worker_processes', 'max_replication_slots',
                       'max_active_replication_origins')) END,
    -- the replication origins besides this subscription's sync workers'
    -- (pg_<subid>_<relid>): its apply worker's (pg_<subid>) and every other
    -- one's; each sync worker needs one more (the subscriber's limit:
    -- max_active_replication_origins, 18+; max_replication_slots before)
    'origins', CASE WHEN n.not_ready > 0 THEN (
        SELECT count(*) FROM pg_replication_origin o
        WHERE o.roname !~ ('^pg_' || s.oid || '_[0-9]+$')) END
  ) ORDER BY d.datname, s.subname), '[]'::json)
FROM pg_subscription s
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE r.srsubstate <> 'r') AS not_ready,
           count(*) FILTER (WHERE r.srsubstate = 'r') AS ready
    FROM pg_subscription_rel r WHERE r.srsubid = s.oid) n
LEFT JOIN pg_stat_subscription_stats st ON st.subid = s.oid
JOIN pg_database d ON d.oid = s.subdbid
