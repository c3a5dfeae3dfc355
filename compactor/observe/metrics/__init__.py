"""The job's metrics and what serves them: the Prometheus metrics (declared once, `declared.py`;
moved by the stream or read at scrape time by the collectors), the `/metrics`, `/healthz` and
`/ready` server and the readiness checks behind it."""
