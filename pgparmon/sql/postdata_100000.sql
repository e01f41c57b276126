-- The post-data objects of the connected database's user tables, as a copy
-- tool rebuilds them on its target: each index (with the constraint it
-- backs, if any) and each foreign key, with the tables they are built on.
-- Catalogs only (no relation locks, no size functions).
SELECT json_build_object(
  'indexes', (SELECT coalesce(json_agg(json_build_array(
                  n.nspname, t.relname, i.relname, co.conname, co.contype::text)), '[]'::json)
              FROM pg_index x
              JOIN pg_class i ON i.oid = x.indexrelid
              JOIN pg_class t ON t.oid = x.indrelid
              JOIN pg_namespace n ON n.oid = t.relnamespace
              LEFT JOIN pg_constraint co ON co.conindid = x.indexrelid
                   AND co.contype IN ('p', 'u', 'x')
              WHERE t.relkind = 'r'
                AND n.nspname NOT IN ('pg_catalog', 'information_schema')
                AND n.nspname !~ '^pg_toast'),
  'fks', (SELECT coalesce(json_agg(json_build_array(
              n.nspname, t.relname, co.conname, rn.nspname || '.' || r.relname)), '[]'::json)
          FROM pg_constraint co
          JOIN pg_class t ON t.oid = co.conrelid
          JOIN pg_namespace n ON n.oid = t.relnamespace
          JOIN pg_class r ON r.oid = co.confrelid
          JOIN pg_namespace rn ON rn.oid = r.relnamespace
          WHERE co.contype = 'f' AND t.relkind = 'r'
            AND n.nspname NOT IN ('pg_catalog', 'information_schema'))
)
