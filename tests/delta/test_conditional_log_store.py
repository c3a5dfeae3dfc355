"""The job's S3 log store never overwrites a commit another process wrote (issue 49: the years
benchmark lost two loads that delta-rs committed between the job's existence check and its PUT).

The race is made exact here: the commit's lines are handed to the store by a Python iterator,
and asking it for the first line lets "another process" (boto3, straight to the S3 server)
commit the same version, after any check the store made and before its PUT."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from py4j.protocol import Py4JJavaError

from compactor.delta import conditional_log_store
from tests.conftest import S3Server

pytestmark = pytest.mark.integration

OURS = b'{"commitInfo":{"by":"the job"}}\n'
THEIRS = b'{"commitInfo":{"by":"a loader"}}\n'


class RacingLines:
    """A `java.util.Iterator<String>` over a commit's lines whose first `next()` runs `meanwhile`."""

    class Java:
        implements: ClassVar[list[str]] = ["java.util.Iterator"]

    def __init__(self, body: bytes, meanwhile: Callable[[], None]) -> None:
        self.lines = body.decode().splitlines()
        self.meanwhile = meanwhile
        self.at = 0

    def hasNext(self) -> bool:  # Java's name
        return self.at < len(self.lines)

    def next(self) -> str:
        if self.at == 0:
            self.meanwhile()
        self.at += 1
        return self.lines[self.at - 1]


@pytest.fixture
def commit_path(s3: S3Server) -> tuple[str, str]:
    """(bucket, key) of version 1 of a fresh table's log."""
    return s3.bucket, f"race-{uuid.uuid4().hex[:8]}/_delta_log/00000000000000000001.json"


def write(spark: Any, store_class: str, s3: S3Server, key: str, lines: Any, overwrite: bool = False) -> None:
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = spark.sparkContext._gateway
    ensure_callback_server_started(gateway)
    jvm = spark._jvm
    hadoop = spark._jsc.hadoopConfiguration()
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()  # where spark.jars are
    signature = gateway.new_array(jvm.java.lang.Class, 1)
    signature[0] = hadoop.getClass()
    arguments = gateway.new_array(jvm.java.lang.Object, 1)
    arguments[0] = hadoop
    store = jvm.java.lang.Class.forName(store_class, True, loader).getConstructor(signature)
    path = jvm.org.apache.hadoop.fs.Path(s3.location(key.removeprefix(f"{s3.bucket}/")))
    store.newInstance(arguments).write(path, lines, jvm.java.lang.Boolean(overwrite), hadoop)


def s3_client(s3: S3Server) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1")


def test_a_commit_another_process_wrote_first_is_kept_and_the_job_told_it_exists(
    spark: Any, s3: S3Server, commit_path: tuple[str, str]
) -> None:
    bucket, key = commit_path
    client = s3_client(s3)
    lines = RacingLines(OURS, lambda: client.put_object(Bucket=bucket, Key=key, Body=THEIRS))
    with pytest.raises(Py4JJavaError) as refused:
        write(spark, conditional_log_store.CLASS_NAME, s3, key, lines)
    # the exception Delta's transaction takes as "another writer won this version": it reads
    # that commit, checks for conflicts and commits after it
    assert refused.value.java_exception.getClass().getName() == "java.nio.file.FileAlreadyExistsException"
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == THEIRS


def test_delta_s_default_s3_store_overwrites_that_commit(
    spark: Any, s3: S3Server, commit_path: tuple[str, str]
) -> None:
    """Why the job does not use it: the same race loses the other writer's commit."""
    bucket, key = commit_path
    client = s3_client(s3)
    lines = RacingLines(OURS, lambda: client.put_object(Bucket=bucket, Key=key, Body=THEIRS))
    write(spark, "io.delta.storage.S3SingleDriverLogStore", s3, key, lines)
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == OURS


def test_a_put_retried_after_its_answer_was_lost_finds_its_own_commit_and_succeeds(
    spark: Any, s3: S3Server, commit_path: tuple[str, str]
) -> None:
    bucket, key = commit_path
    client = s3_client(s3)
    # the first PUT landed and its answer was lost: the retry meets the same bytes
    lines = RacingLines(OURS, lambda: client.put_object(Bucket=bucket, Key=key, Body=OURS))
    write(spark, conditional_log_store.CLASS_NAME, s3, key, lines)
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == OURS


def test_an_overwrite_replaces_the_object(spark: Any, s3: S3Server, commit_path: tuple[str, str]) -> None:
    """`_last_checkpoint` and the like are written with overwrite: the last writer wins."""
    bucket, key = commit_path
    client = s3_client(s3)
    client.put_object(Bucket=bucket, Key=key, Body=THEIRS)
    write(spark, conditional_log_store.CLASS_NAME, s3, key, RacingLines(OURS, lambda: None), overwrite=True)
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == OURS


def test_appends_from_the_job_and_from_delta_rs_at_once_are_all_kept(spark: Any, s3: S3Server) -> None:
    """Delta's transaction and delta-rs commit one table at the same time, each retrying after the
    other's commits: every append is in the table once."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    location = s3.location(f"both-{uuid.uuid4().hex[:8]}")
    options = {
        "AWS_ENDPOINT_URL": s3.endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "conditional_put": "etag",
    }
    uri = location.replace("s3a://", "s3://")
    write_deltalake(uri, pa.table({"source": ["seed"], "n": [0]}), storage_options=options)
    rounds = 8
    errors: list[BaseException] = []

    def loads_from_delta_rs() -> None:
        try:
            for n in range(1, rounds + 1):
                write_deltalake(
                    uri, pa.table({"source": ["rs"], "n": [n]}), mode="append", storage_options=options
                )
        except BaseException as error:  # the assertion below names it
            errors.append(error)

    other = threading.Thread(target=loads_from_delta_rs)
    other.start()
    for n in range(1, rounds + 1):
        spark.createDataFrame([("spark", n)], "source string, n long").write.format("delta").mode(
            "append"
        ).save(location)
    other.join()
    assert not errors, errors
    rows = sorted(DeltaTable(uri, storage_options=options).to_pyarrow_table().to_pylist(), key=str)
    expected = [{"source": "seed", "n": 0}] + [
        {"source": s, "n": n} for s in ("rs", "spark") for n in range(1, rounds + 1)
    ]
    assert rows == sorted(expected, key=str)
    assert DeltaTable(uri, storage_options=options).version() == 2 * rounds
