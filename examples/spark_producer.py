"""Load one day of sample orders as a segment from a Spark job, and announce it.

Run it against the demo's broker (`compactor kafka start --port 9092` starts one on 127.0.0.1:9092):

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 WAREHOUSE=/tmp/warehouse python examples/spark_producer.py
"""

import os
from datetime import UTC, datetime, timedelta

from compactor import SparkLoader, sample_rows
from compactor.spark.session import build_spark

spark = build_spark("orders-loader")  # any Spark session with Delta Lake will do
servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
warehouse = os.environ.get("WAREHOUSE", "/tmp/warehouse")

day = datetime(2024, 1, 1, tzinfo=UTC)
rows = sample_rows(spark, day, day + timedelta(days=1), count=100)  # your DataFrame here
topic = os.environ.get("SEGMENTS_TOPIC", "compactor.segments")
with SparkLoader(spark, warehouse, servers, segments_topic=topic) as loader:
    segment = loader.load("orders", rows, day, day + timedelta(days=1))
print(f"loaded {segment.id}: {segment.records} rows, {segment.bytes} bytes")
