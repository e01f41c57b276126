-- The databases `vacuumdb -a` processes, in its order (jobs/vacuumdb.py):
-- those that accept connections and are valid (datconnlimit -2: a DROP
-- DATABASE cut short, 15.4+), by name.
SELECT coalesce(json_agg(datname ORDER BY datname), '[]'::json)
FROM pg_database
WHERE datallowconn AND datconnlimit <> -2
