-- The tables of the connected database with the sizes pg_dump orders by
-- (relpages of the table and its TOAST table). pg_class only: no
-- pg_relation_size(), which would queue behind pg_restore's exclusive locks.
-- pg_relation_filepath() reads the syscache and takes no relation lock.
SELECT coalesce(json_agg(json_build_array(
    c.oid::int8, n.nspname, c.relname, c.relkind::text, c.relpages::int8, c.reltuples::float8,
    coalesce(t.relpages, 0)::int8, pg_relation_filepath(c.oid))), '[]'::json)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_class t ON t.oid = c.reltoastrelid
WHERE c.relkind IN ('r', 'm', 'p')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname !~ '^pg_toast'
