-- vacuumdb's work list in the connected database (jobs/vacuumdb.py): every
-- relation vacuumdb may be asked to process (tables and materialized views,
-- which it takes by default, and partitioned tables, which -t may name;
-- temporary tables left out, as it does), with what it orders them by
-- (relpages) and what sizes their work (TOAST relpages, a partitioned
-- table's partitions' relpages, the file for the size of one never
-- vacuumed), what --min-xid-age / --min-mxid-age filter on (the greater of
-- the table's and its TOAST table's age), when each was last vacuumed and
-- analyzed by hand and last analyzed by autovacuum (never analyzed: what
-- --missing-stats-only takes), with the statistics target ANALYZE samples
-- for: the server's default, and per table the largest target set on one of
-- its columns (ALTER TABLE ... SET STATISTICS) or its extended statistics
-- (ALTER STATISTICS ... SET STATISTICS; to_jsonb: that column is 13+), and
-- whether any column takes the default (-1 before 17, NULL since). The
-- first eight columns are the
-- `tables` query's. pg_class, pg_inherits, pg_attribute, pg_statistic_ext and
-- statistics only: no lock on a
-- user table (pg_partition_tree() would take one).
WITH RECURSIVE parts (root, oid) AS (
    SELECT i.inhparent, i.inhrelid FROM pg_inherits i
    JOIN pg_class p ON p.oid = i.inhparent AND p.relkind = 'p'
  UNION ALL
    SELECT parts.root, i.inhrelid FROM parts JOIN pg_inherits i ON i.inhparent = parts.oid
)
SELECT json_build_object(
  'target', current_setting('default_statistics_target')::int,
  'tables', (SELECT coalesce(json_agg(json_build_array(
      c.oid::int8, n.nspname, c.relname, c.relkind::text, c.relpages::int8,
      c.reltuples::float8, coalesce(t.relpages, 0)::int8, pg_relation_filepath(c.oid),
      c.reltoastrelid::int8,
      CASE WHEN c.relkind = 'p' THEN (SELECT coalesce(sum(pc.relpages), 0)::int8
                                      FROM parts JOIN pg_class pc ON pc.oid = parts.oid
                                      WHERE parts.root = c.oid) END,
      CASE WHEN c.relfrozenxid::text <> '0'
           THEN greatest(age(c.relfrozenxid), age(t.relfrozenxid)) END,
      CASE WHEN c.relminmxid::text <> '0'
           THEN greatest(mxid_age(c.relminmxid), mxid_age(t.relminmxid)) END,
      extract(epoch FROM s.last_vacuum)::float8, extract(epoch FROM s.last_analyze)::float8,
      extract(epoch FROM s.last_autoanalyze)::float8,
      (SELECT greatest(max(nullif(a.attstattarget, -1)),
                       (SELECT max(nullif((to_jsonb(x) ->> 'stxstattarget')::int, -1))
                        FROM pg_statistic_ext x WHERE x.stxrelid = c.oid))
       FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
      (SELECT coalesce(bool_or(coalesce(a.attstattarget, -1) < 0), false)
       FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped))
      ORDER BY c.relpages DESC, c.oid), '[]'::json)
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_class t ON t.oid = c.reltoastrelid
    LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
    WHERE c.relkind IN ('r', 'm', 'p') AND c.relpersistence <> 't')
)
