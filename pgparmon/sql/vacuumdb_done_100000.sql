-- What a followed vacuumdb has finished in the connected database since its
-- round began (jobs/vacuumdb.py), read with every sample: a table it
-- processed between two samples is never seen running, and only the
-- statistics say it ran. Read only while the followed job's own sessions
-- (pids) include vacuumdb's in this database: the tables whose last VACUUM
-- or ANALYZE by hand came after those sessions began (the round they serve
-- began then: vacuumdb reconnects for each database and stage). Statistics
-- only: no lock on a user table.
SELECT CASE WHEN m.since IS NOT NULL THEN json_build_object(
    'db', current_database(), 'since', extract(epoch FROM m.since)::float8,
    'tables', (SELECT coalesce(json_agg(json_build_array(
                   s.relid::int8, extract(epoch FROM s.last_vacuum)::float8,
                   extract(epoch FROM s.last_analyze)::float8)), '[]'::json)
               FROM pg_stat_all_tables s
               WHERE s.last_vacuum >= m.since OR s.last_analyze >= m.since)) END
FROM (SELECT min(a.backend_start) AS since FROM pg_stat_activity a
      WHERE a.pid = ANY(%(pids)s::int[]) AND a.datname = current_database()
        AND a.application_name ~ '^vacuumdb') m
