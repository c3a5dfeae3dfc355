"""The compaction job for spark-submit: a thin entry over `compactor.stream.job`.

    spark-submit streaming_jobs/compact_segments.py --config tables.yaml \
        --warehouse /data/warehouse --checkpoint /data/checkpoint --bootstrap-servers host:9092
"""

from compactor.stream.job import main

if __name__ == "__main__":
    main()
