-- The connected database's large objects, for a dump's large-object items:
-- how many (pg_largeobject_metadata, a catalog scan, read once when the
-- dump's table of contents names such items) and the pages pg_largeobject
-- fills (pg_class, as VACUUM or ANALYZE left it). Catalogs only.
SELECT json_build_object(
  'count', (SELECT count(*) FROM pg_largeobject_metadata),
  'pages', (SELECT relpages FROM pg_class WHERE oid = 'pg_catalog.pg_largeobject'::regclass)
)
