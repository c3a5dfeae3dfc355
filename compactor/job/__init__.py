"""The job's runtime, above the stream: `compactor run` from its settings to its stop (`run.py`),
one composition root that wires a shard's handler (`wiring.py`) between the two halves of its
start-up (`startup.py`), a shard's streaming query on Spark (`query.py`, `spark_shard.py`), the
shards the lease gives and takes (`shard_jobs.py`, `resharding.py`), and the threads beside the
batches (the ticker, the VACUUM schedule, the minute's summary, the lease's log)."""
