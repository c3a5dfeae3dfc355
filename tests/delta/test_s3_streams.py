"""The job reads S3 objects through S3A's classic stream (`session.S3_DEFAULTS`): Hadoop 3.5's
default, the analytics accelerator, kept each object's stream statistics after the stream
closed, and a job that reads its tables' logs all day filled its heap with them."""

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
