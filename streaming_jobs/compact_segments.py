"""The compaction job for spark-submit: `compactor run` with the same options.

    spark-submit --master spark://host:7077 $(compactor jars --spark-submit-args) \
        streaming_jobs/compact_segments.py --config tables.yaml \
        --warehouse /data/warehouse --checkpoint /data/checkpoint --bootstrap-servers host:9092
"""

import sys

from compactor.cli.main import main

if __name__ == "__main__":
    main(["run", *sys.argv[1:]], prog_name="compact_segments.py")
