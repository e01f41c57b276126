-- Which of the given qualified names exist now (post-data items of a restore
-- leave an index or constraint behind). Catalog rows only, no locks.
SELECT coalesce(json_agg(n.nspname || '.' || c.relname), '[]'::json)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname || '.' || c.relname = ANY($1::text[])
