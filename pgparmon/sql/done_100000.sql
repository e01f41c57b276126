-- What a restore has already finished, from catalogs and statistics only (no
-- relation locks): tables that received rows, and index / constraint names
-- that exist. Used when attaching mid-run and to settle the end of a run.
SELECT json_build_object(
  'loaded', (SELECT coalesce(json_agg(schemaname || '.' || relname), '[]'::json)
             FROM pg_stat_user_tables WHERE n_tup_ins > 0),
  'relations', (SELECT coalesce(json_agg(n.nspname || '.' || c.relname), '[]'::json)
                FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE c.relkind IN ('i', 'I')
                  AND n.nspname NOT IN ('pg_catalog', 'information_schema')),
  'constraints', (SELECT coalesce(json_agg(n.nspname || '.' || co.conname), '[]'::json)
                  FROM pg_constraint co JOIN pg_namespace n ON n.oid = co.connamespace
                  WHERE n.nspname NOT IN ('pg_catalog', 'information_schema'))
)
