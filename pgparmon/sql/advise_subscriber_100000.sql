-- What the advice for a subscription's initial sync reads on the
-- subscriber: the settings its workers need, the subscription (when it
-- exists: its publications, slot and tables in the order the apply worker
-- starts them) and what other work holds of those settings now (its own
-- workers left out). Catalogs and statistics views only: no relation locks.
-- Parameter: name (the subscription's name; may not exist yet).
WITH me AS (
  SELECT s.oid, s.subname, s.subenabled, s.subslotname, s.subpublications
  FROM pg_subscription s
  WHERE s.subname = %(name)s
    AND s.subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())
), mine AS (
  SELECT w.pid FROM pg_stat_subscription w WHERE w.subid IN (SELECT oid FROM me)
    AND w.pid IS NOT NULL
)
SELECT json_build_object(
  'version_num', current_setting('server_version_num')::int,
  'settings', (SELECT json_object_agg(name, setting) FROM pg_settings
               WHERE name IN ('max_logical_replication_workers', 'max_worker_processes',
                              'max_sync_workers_per_subscription', 'max_replication_slots',
                              'max_active_replication_origins', 'max_wal_size',
                              'max_parallel_apply_workers_per_subscription')),
  'subscription', (SELECT json_build_object(
                     'oid', me.oid, 'name', me.subname, 'enabled', me.subenabled,
                     'slot', me.subslotname, 'publications', me.subpublications,
                     'workers', (SELECT count(*) FROM mine),
                     'tables', (SELECT json_agg(json_build_array(n.nspname || '.' || c.relname,
                                                                 r.srsubstate) ORDER BY r.ctid)
                                FROM pg_subscription_rel r
                                JOIN pg_class c ON c.oid = r.srrelid
                                JOIN pg_namespace n ON n.oid = c.relnamespace
                                WHERE r.srsubid = me.oid))
                   FROM me),
  'others', json_build_object(
    -- logical replication workers of other subscriptions (every database)
    'workers', (SELECT count(*) FROM pg_stat_subscription w
                WHERE w.pid IS NOT NULL AND w.pid NOT IN (SELECT pid FROM mine)),
    -- background workers (each takes a max_worker_processes slot): the
    -- launcher, other subscriptions' workers, parallel query workers, extensions
    'bgworkers', (SELECT count(*) FROM pg_stat_activity a
                  WHERE a.backend_type NOT IN (
                          'client backend', 'autovacuum launcher', 'autovacuum worker',
                          'background writer', 'checkpointer', 'walwriter', 'startup',
                          'archiver', 'walsender', 'walreceiver', 'walsummarizer',
                          'io worker', 'slotsync worker', 'logger', 'standalone backend')
                    AND a.pid NOT IN (SELECT pid FROM mine)))
)
