"""Load a pandas DataFrame as a segment with no Spark and no JVM (delta-rs), and announce it.

Needs `pip install 'streaming-compactor[deltars]' pandas`. Run it against the demo's broker:

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 WAREHOUSE=/tmp/warehouse python examples/arrow_producer.py
"""

import os
from datetime import UTC, datetime, timedelta

import pandas as pd

from compactor import ArrowLoader

servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
warehouse = os.environ.get("WAREHOUSE", "/tmp/warehouse")

hour = datetime(2024, 1, 1, tzinfo=UTC)
rows = pd.DataFrame(
    {
        "event_time": pd.date_range(hour, periods=60, freq="1min"),
        "sensor": [f"s{i % 6}" for i in range(60)],
        "reading": [float(i) for i in range(60)],
    }
)
topic = os.environ.get("SEGMENTS_TOPIC", "compactor.segments")
with ArrowLoader(warehouse, servers, segments_topic=topic) as loader:
    segment = loader.load("readings", rows, hour, hour + timedelta(hours=1))
print(f"loaded {segment.id}: {segment.records} rows, {segment.bytes} bytes")
