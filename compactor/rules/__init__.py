"""Rule planners: pure functions (segments, table settings, now) -> plans.

No Spark, Kafka or Delta here: planners run in microseconds and power both the
streaming handler and the `compactor plan` dry run.
"""
