-- One backend's locks, held and awaited (on demand, not per tick).
SELECT coalesce(json_agg(json_build_object(
    'locktype', l.locktype, 'mode', l.mode, 'granted', l.granted,
    'relation', CASE WHEN c.oid IS NOT NULL THEN n.nspname || '.' || c.relname END,
    'blocked_by', CASE WHEN NOT l.granted THEN pg_blocking_pids(l.pid) END)
  ORDER BY l.granted, c.relname), '[]'::json)
FROM pg_locks l
LEFT JOIN pg_class c ON c.oid = l.relation
LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE l.pid = %(pid)s
