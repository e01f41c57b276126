-- What a restore has already finished, from catalogs and statistics only (no
-- relation locks): tables that received rows, and index / constraint names
-- that exist; and what a maintenance run finished: when each table (its
-- oid, its name) was last vacuumed and analyzed by hand; and the pages of
-- large objects committed (pg_largeobject's live rows, from the statistics:
-- the table itself only a superuser may read). Used when attaching mid-run
-- and to settle the end of a run.
SELECT json_build_object(
  'loaded', (SELECT coalesce(json_agg(schemaname || '.' || relname), '[]'::json)
             FROM pg_stat_user_tables WHERE n_tup_ins > 0),
  'relations', (SELECT coalesce(json_agg(n.nspname || '.' || c.relname), '[]'::json)
                FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE c.relkind IN ('i', 'I')
                  AND n.nspname NOT IN ('pg_catalog', 'information_schema')),
  'constraints', (SELECT coalesce(json_agg(n.nspname || '.' || co.conname), '[]'::json)
                  FROM pg_constraint co JOIN pg_namespace n ON n.oid = co.connamespace
                  WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')),
  'maintained', (SELECT coalesce(json_agg(json_build_array(
                   relid::int8, schemaname || '.' || relname,
                   extract(epoch FROM last_vacuum)::float8,
                   extract(epoch FROM last_analyze)::float8)), '[]'::json)
                 FROM pg_stat_all_tables
                 WHERE (last_vacuum IS NOT NULL OR last_analyze IS NOT NULL)
                   AND schemaname !~ '^pg_toast'),
  'large_object_pages', (SELECT n_live_tup FROM pg_stat_sys_tables
                         WHERE relid = 'pg_catalog.pg_largeobject'::regclass)
)
