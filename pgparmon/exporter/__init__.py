"""`pgparmon exporter`: follow every job on one or more servers and serve
Prometheus metrics (daemon.py: the command and its loop; followers.py: the
servers watched and the jobs followed; collector.py: the metrics;
retention.py: the recordings directory; web.py with webconfig.py, tls.py
and auth.py: /metrics over HTTP(S)). docs/metrics.md lists the metrics."""
