-- The connection strings of this database's subscriptions. Only a role that
-- may read pg_subscription.subconninfo (not granted to PUBLIC) can run it:
-- the caller takes a privilege error as "not readable". They may hold a
-- password: never shown, recorded or logged.
SELECT json_object_agg(s.subname, s.subconninfo) FROM pg_subscription s
WHERE s.subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())
