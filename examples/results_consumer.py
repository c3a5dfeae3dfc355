"""Keep "which segments make up table T" current from the merge results, with no JVM.

The starting set is read from the table (delta-rs); from then on each merge result
replaces its inputs with its outputs. The consumer group remembers how far it got:

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 WAREHOUSE=/tmp/warehouse TABLE=sales \
        python examples/results_consumer.py
"""

import os

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from compactor import MergeStatus, ResultsFollower

servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
warehouse, table = os.environ.get("WAREHOUSE", "/tmp/warehouse"), os.environ.get("TABLE", "sales")
idle = float(os.environ.get("IDLE_SECONDS", "10"))  # stop after this long without a result

files = pa.table(DeltaTable(f"{warehouse}/{table}").get_add_actions(flatten=True))
segments = set(pc.unique(files.column("partition.segment_id")).to_pylist())
topic = os.environ.get("RESULTS_TOPIC", "compactor.results")
with ResultsFollower(f"segment-cache-{table}", servers, results_topic=topic) as results:
    for result in results.follow(idle_timeout=idle):
        if result["table"] == table and result["status"] is MergeStatus.SUCCEEDED:
            outputs = result["outputs"] or [result["output"]]
            segments = (segments - set(result["inputs"])) | {o["segment_id"] for o in outputs}
            print(f"{result['rule']} merged {len(result['inputs'])} into {len(outputs)}: {len(segments)} now")
print(" ".join(sorted(segments)))
