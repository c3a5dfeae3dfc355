"""What `class_archive.build`'s child runs, its JVM writing the archive as it exits: a driver's
start as the job makes one, a session with the compactor's settings, and a Delta table written,
read and described (so Delta's classes are in the archive too).

Run: python -m compactor.spark.archive_workload SCRATCH_DIR (with COMPACTOR_CLASS_ARCHIVE_DUMP set)
"""

from __future__ import annotations

import sys
from pathlib import Path

from compactor.spark.session import build_spark


def run(scratch: Path) -> None:
    spark = build_spark("class-archive", master="local[1]")
    table = (scratch / "t").as_uri()
    rows = spark.range(10).selectExpr("id", "cast(id AS string) AS segment_id")
    rows.write.format("delta").partitionBy("segment_id").save(table)
    spark.read.format("delta").load(table).groupBy("segment_id").count().collect()
    spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()
    spark.stop()


if __name__ == "__main__":
    run(Path(sys.argv[1]))
