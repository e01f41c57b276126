-- What the advice for a subscription's initial sync reads on the
-- publisher: wal_level, the walsenders and slots the sync workers take and
-- what other work holds of them now (the subscription's own left out), and
-- the published tables' sizes from pg_class (relpages and reltuples of the
-- table, its TOAST and, for a partitioned table published through its root,
-- its partitions). Catalogs and statistics views only: no relation locks.
-- Parameters: pubs (publication names), slot (the subscription's slot, or
-- NULL), appname (its apply walsender's application_name), sync (the prefix
-- of its sync slots, pg_<subid>_sync_, or NULL).
WITH RECURSIVE pt AS (
  SELECT DISTINCT p.schemaname, p.tablename FROM pg_publication_tables p
  WHERE p.pubname = ANY(%(pubs)s)
), rel AS (
  SELECT c.oid, n.nspname, c.relname FROM pt
  JOIN pg_namespace n ON n.nspname = pt.schemaname
  JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
), tree(root, oid) AS (
  SELECT oid, oid FROM rel
  UNION ALL
  SELECT t.root, i.inhrelid FROM tree t
  JOIN pg_class pc ON pc.oid = t.oid AND pc.relkind = 'p'
  JOIN pg_inherits i ON i.inhparent = t.oid
)
SELECT json_build_object(
  'version_num', current_setting('server_version_num')::int,
  'settings', (SELECT json_object_agg(name, setting) FROM pg_settings
               WHERE name IN ('wal_level', 'max_wal_senders', 'max_replication_slots',
                              'block_size')),
  'publications', (SELECT json_agg(pubname) FROM pg_publication
                   WHERE pubname = ANY(%(pubs)s)),
  'others', json_build_object(
    'walsenders', (SELECT count(*) FROM pg_stat_activity a WHERE a.backend_type = 'walsender'
                   AND a.application_name IS DISTINCT FROM %(appname)s
                   AND (%(sync)s::text IS NULL
                        OR left(a.application_name, length(%(sync)s)) <> %(sync)s)),
    'slots', (SELECT count(*) FROM pg_replication_slots s
              WHERE s.slot_name IS DISTINCT FROM %(slot)s
                AND (%(sync)s::text IS NULL
                     OR left(s.slot_name::text, length(%(sync)s)) <> %(sync)s))),
  'tables', (SELECT coalesce(json_agg(json_build_object(
               'table', r.nspname || '.' || r.relname,
               'pages', (SELECT sum(c.relpages + coalesce(tc.relpages, 0)) FROM tree t
                         JOIN pg_class c ON c.oid = t.oid
                         LEFT JOIN pg_class tc ON tc.oid = c.reltoastrelid
                         WHERE t.root = r.oid),
               'rows', (SELECT sum(greatest(c.reltuples, 0)) FROM tree t
                        JOIN pg_class c ON c.oid = t.oid WHERE t.root = r.oid))
             ORDER BY r.nspname, r.relname), '[]') FROM rel r)
)
