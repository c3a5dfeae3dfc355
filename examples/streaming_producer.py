"""A Structured Streaming producer: each micro-batch of JSON files becomes one segment, exactly once.

Drop JSON lines (`{"event_time": ..., "user_id": ..., "amount": ...}`) into $INPUT; each
micro-batch is appended to table `clicks` and announced, and a restart from the same
checkpoint neither writes a batch twice nor announces a different segment:

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 WAREHOUSE=/tmp/warehouse INPUT=/tmp/clicks \
        CHECKPOINT=/tmp/clicks-checkpoint python examples/streaming_producer.py
"""

import os

from compactor import SparkLoader, StreamingSink
from compactor.spark.session import build_spark

spark = build_spark("clicks-producer")
servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
warehouse = os.environ.get("WAREHOUSE", "/tmp/warehouse")
source, checkpoint = os.environ.get("INPUT", "/tmp/clicks"), os.environ.get("CHECKPOINT", "/tmp/clicks-cp")

topic = os.environ.get("SEGMENTS_TOPIC", "compactor.segments")
with SparkLoader(spark, warehouse, servers, segments_topic=topic) as loader:
    query = (
        spark.readStream.schema("event_time timestamp, user_id bigint, amount double")
        .option("maxFilesPerTrigger", 1)
        .json(source)
        .writeStream.foreachBatch(StreamingSink(loader, "clicks", time_column="event_time"))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)  # drop this to keep running
        .start()
    )
    query.awaitTermination()
print(f"loaded {len(query.recentProgress)} micro-batch(es)")
