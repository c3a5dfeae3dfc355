"""The job's S3 log store never overwrites a commit another process wrote (issue 49: the years
benchmark lost two loads that delta-rs committed between the job's existence check and its PUT).

The race is made exact here: the commit's lines are handed to the store by a Python iterator,
and asking it for the first line lets "another process" (boto3, straight to the S3 server)
commit the same version, after any check the store made and before its PUT."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
from py4j.protocol import Py4JJavaError

from compactor.spark import conditional_log_store
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


@dataclass
class Race:
    """Version 1 of a fresh table's log on the S3 server, written by a log store while another
    process (boto3) may put its own commit there first."""

    spark: Any
    s3: S3Server
    key: str = field(
        default_factory=lambda: f"race-{uuid.uuid4().hex[:8]}/_delta_log/00000000000000000001.json"
    )

    def __post_init__(self) -> None:
        import boto3

        self.client = boto3.client("s3", endpoint_url=self.s3.endpoint, region_name="us-east-1")

    def put(self, body: bytes) -> None:
        self.client.put_object(Bucket=self.s3.bucket, Key=self.key, Body=body)

    def write(self, store_class: str, meanwhile: bytes | None = None, overwrite: bool = False) -> None:
        """The store writes our commit; `meanwhile`: what the other process puts first, after any
        check the store made and before its PUT."""
        from pyspark.java_gateway import ensure_callback_server_started

        gateway, jvm = self.spark.sparkContext._gateway, self.spark._jvm
        ensure_callback_server_started(gateway)
        hadoop = self.spark._jsc.hadoopConfiguration()
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()  # where spark.jars are
        signature = gateway.new_array(jvm.java.lang.Class, 1)
        signature[0] = hadoop.getClass()
        arguments = gateway.new_array(jvm.java.lang.Object, 1)
        arguments[0] = hadoop
        store = jvm.java.lang.Class.forName(store_class, True, loader).getConstructor(signature)
        path = jvm.org.apache.hadoop.fs.Path(self.s3.location(self.key))
        lines = RacingLines(OURS, (lambda: self.put(meanwhile)) if meanwhile is not None else (lambda: None))
        store.newInstance(arguments).write(path, lines, jvm.java.lang.Boolean(overwrite), hadoop)

    def held(self) -> bytes:
        return bytes(self.client.get_object(Bucket=self.s3.bucket, Key=self.key)["Body"].read())


@pytest.fixture
def race(spark: Any, s3: S3Server) -> Race:
    return Race(spark, s3)


def test_a_commit_another_process_wrote_first_is_kept_and_the_job_told_it_exists(race: Race) -> None:
    with pytest.raises(Py4JJavaError) as refused:
        race.write(conditional_log_store.CLASS_NAME, meanwhile=THEIRS)
    # the exception Delta's transaction takes as "another writer won this version": it reads
    # that commit, checks for conflicts and commits after it
    assert refused.value.java_exception.getClass().getName() == "java.nio.file.FileAlreadyExistsException"
    assert race.held() == THEIRS


def test_delta_s_default_s3_store_overwrites_that_commit(race: Race) -> None:
    """Why the job does not use it: the same race loses the other writer's commit."""
    race.write("io.delta.storage.S3SingleDriverLogStore", meanwhile=THEIRS)
    assert race.held() == OURS


def test_a_put_retried_after_its_answer_was_lost_finds_its_own_commit_and_succeeds(race: Race) -> None:
    race.write(conditional_log_store.CLASS_NAME, meanwhile=OURS)  # the first PUT landed, unanswered
    assert race.held() == OURS


def test_an_overwrite_replaces_the_object(race: Race) -> None:
    """`_last_checkpoint` and the like are written with overwrite: the last writer wins."""
    race.put(THEIRS)
    race.write(conditional_log_store.CLASS_NAME, overwrite=True)
    assert race.held() == OURS


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
