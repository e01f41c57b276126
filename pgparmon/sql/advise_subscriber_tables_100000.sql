-- The published tables as the subscriber has them (its schema must hold
-- them before the sync): each one found, its relkind and the indexes its
-- COPY FROM maintains. pg_class and pg_index only: no relation locks.
-- Parameter: tables (schema.name, as the publisher names them).
SELECT coalesce(json_agg(json_build_object(
         'table', n.nspname || '.' || c.relname, 'relkind', c.relkind,
         'indexes', (SELECT count(*) FROM pg_index i WHERE i.indrelid = c.oid))), '[]')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname || '.' || c.relname = ANY(%(tables)s) AND c.relkind IN ('r', 'p')
