"""`pgparmon exporter`: follow every job on one or more servers and serve
Prometheus metrics (daemon.py: the process; collector.py: the metrics;
retention.py: the recordings directory). docs/metrics.md lists the metrics."""
