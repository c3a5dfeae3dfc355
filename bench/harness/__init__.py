"""The benchmarks' library: what their scenarios share, so that each script holds only its
scenario, its targets and its report.

- `report`: the machine, the results file, tables, percentiles, the shared command line;
- `targets`: the figures each script promises, judged once;
- `loads` (delta-rs segments and their events) and `spark_rows` (rows Spark writes as segments);
- `job_process`: `compactor run` as an operator runs it, read through its /metrics and its log;
- `services`: a Kafka broker, and an S3 API server behind Toxiproxy;
- `probes`: a process tree's memory and CPU, a JVM's heap, native memory and threads;
- `results`: the results topic as a consumer sees it, checked against the tables' commits;
- `two_jobs` (capacity's drain by two jobs of one shard each) and `restart` (startup's three
  starts of `compactor run`): parts of a scenario kept apart from its script.

Scripts run as `python bench/<name>.py`, which puts `bench/` on sys.path: they import it as
`harness`.
"""
