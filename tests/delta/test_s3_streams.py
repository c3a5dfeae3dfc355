"""How the job's session reaches S3 (`session.S3_DEFAULTS`): objects read through S3A's classic
stream (Hadoop 3.5's default, the analytics accelerator, kept each object's stream statistics after
the stream closed, and a job that reads its tables' logs all day filled its heap with them), and
checkpoint and checksum files written through the cached file system, not a new one each."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.conftest import S3Server

pytestmark = pytest.mark.integration


def test_an_object_is_read_through_the_classic_stream(spark: Any, s3: S3Server) -> None:
    import boto3

    key = f"streams-{uuid.uuid4().hex[:8]}/_delta_log/00000000000000000000.json"
    body = b'{"commitInfo":{}}\n'
    boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1").put_object(
        Bucket=s3.bucket, Key=key, Body=body
    )
    path = spark._jvm.org.apache.hadoop.fs.Path(s3.location(key))
    stream = path.getFileSystem(spark._jsc.hadoopConfiguration()).open(path)
    try:
        assert stream.getWrappedStream().getClass().getSimpleName() == "S3AInputStream"
        assert bytes(stream.readAllBytes()) == body
    finally:
        stream.close()


def test_checkpoint_and_checksum_files_are_written_through_the_cached_file_system(
    spark: Any, s3: S3Server
) -> None:
    jvm = spark._jvm
    manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager
    path = jvm.org.apache.hadoop.fs.Path(s3.location(f"streams-{uuid.uuid4().hex[:8]}/_delta_log"))
    # the Hadoop configuration Spark's stream and Delta's log both build from the session
    chosen = manager.create(path, spark._jsparkSession.sessionState().newHadoopConf())
    assert chosen.getClass().getSimpleName() == "FileSystemBasedCheckpointFileManager"
