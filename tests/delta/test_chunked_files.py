"""Large files (a key index snapshot of millions of keys is hundreds of megabytes) go to and from
the warehouse in pieces: no py4j call carries more than `HadoopFiles.chunk_bytes` of a file (as
base64 text), the round trip is exact, and a write that fails midway publishes nothing (issue 49:
a 280 MB snapshot was one ~373 MB py4j command in a 1 GiB driver JVM)."""

from __future__ import annotations

import gc
import itertools
import os
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compactor.catalog.key_index import IndexSnapshot
from compactor.delta.files import HadoopFiles
from compactor.delta.warehouse.key_index_snapshots import KeyIndexSnapshots
from tests.conftest import S3Server
from tests.delta.test_key_index_snapshots import read_back

pytestmark = pytest.mark.integration

CHUNK = 64 << 10
# a piece as base64 text, and what a call names besides it (object ids, the method)
MOST_PER_CALL = CHUNK * 4 // 3 + 1024
SNAPSHOT = os.urandom(16 * CHUNK + 12345)  # more than a chunk, and not a whole number of them


@contextmanager
def py4j_traffic(spark: Any) -> Iterator[list[tuple[int, int]]]:
    """(characters sent, characters answered) of every py4j call made meanwhile."""
    client = spark.sparkContext._gateway._gateway_client
    assert spark._jvm._gateway_client is client, "every JVM object here talks through this client"
    calls: list[tuple[int, int]] = []
    send = client.send_command

    def measured(command: str, *args: Any, **kwargs: Any) -> Any:
        answer = send(command, *args, **kwargs)
        calls.append((len(command), len(answer) if isinstance(answer, str) else 0))
        return answer

    client.send_command = measured
    try:
        yield calls
    finally:
        del client.send_command  # the class's method again


@pytest.fixture(params=["local", "viewfs", "s3"])
def location(request: pytest.FixtureRequest, tmp_path: Path, spark: Any) -> str:
    """A local folder (Python writes it), one behind Hadoop's view file system (the JVM writes a
    staging file and renames it over), and an S3 bucket (the JVM writes the object itself)."""
    if request.param == "local":
        return str(tmp_path / "warehouse")
    if request.param == "viewfs":
        mounted = tmp_path / "mounted"
        mounted.mkdir()
        name = f"chunks{uuid.uuid4().hex[:8]}"  # file systems are cached by authority: a new one
        spark._jsc.hadoopConfiguration().set(f"fs.viewfs.mounttable.{name}.link./data", mounted.as_uri())
        return f"viewfs://{name}/data/warehouse"
    s3: S3Server = request.getfixturevalue("s3")
    return s3.location(f"warehouse-{uuid.uuid4().hex[:8]}")


def _files(spark: Any) -> HadoopFiles:
    files = HadoopFiles(spark)
    files.chunk_bytes = CHUNK
    return files


def test_a_snapshot_bigger_than_a_chunk_goes_to_and_from_the_store_in_pieces(
    spark: Any, location: str
) -> None:
    snapshots = KeyIndexSnapshots(_files(spark), location)
    with py4j_traffic(spark) as saving:
        snapshots.save("t", 7, lambda out: out.write(SNAPSHOT), keys=3)
    with py4j_traffic(spark) as loading:
        loaded = read_back(snapshots)

    assert loaded == (7, SNAPSHOT), "read back exactly"
    facts = snapshots.describe("t")
    assert facts is not None and (facts["version"], facts["keys"], facts["bytes"]) == (7, 3, len(SNAPSHOT))
    assert max(sent for sent, _ in saving) <= MOST_PER_CALL, "no call sends more than a piece"
    assert max(answered for _, answered in loading) <= MOST_PER_CALL, "no answer brings more than a piece"
    if not location.startswith("/"):  # through the JVM: one call per piece each way
        pieces = -(-len(SNAPSHOT) // CHUNK)
        assert sum(sent > 4096 for sent, _ in saving) == pieces
        assert sum(answered > 4096 for _, answered in loading) == pieces


def test_a_snapshot_written_from_pieces_of_any_size_is_the_pieces_joined(spark: Any, location: str) -> None:
    snapshots = KeyIndexSnapshots(_files(spark), location)
    cuts = [0, 10, CHUNK - 1, CHUNK + 5, 3 * CHUNK, 3 * CHUNK, 5 * CHUNK + 7, len(SNAPSHOT)]
    pieces = (SNAPSHOT[a:b] for a, b in itertools.pairwise(cuts))  # one piece empty
    with py4j_traffic(spark) as saving:
        snapshots.save_chunks("t", 2, pieces, keys=1)
    assert read_back(snapshots) == (2, SNAPSHOT)
    assert max(sent for sent, _ in saving) <= MOST_PER_CALL
    facts = snapshots.describe("t")
    assert facts is not None and facts["bytes"] == len(SNAPSHOT)


def test_a_write_that_fails_midway_leaves_the_old_file_and_nothing_else(spark: Any, location: str) -> None:
    files = _files(spark)
    uri = f"{location}/state/file.bin"
    files.replace_bytes(uri, b"the old bytes")

    def failing() -> Iterator[bytes]:
        yield SNAPSHOT[: 3 * CHUNK]  # sent to the store already
        raise RuntimeError("the encoder failed")

    with pytest.raises(RuntimeError, match="the encoder failed"):
        files.replace_chunks(uri, failing())
    assert files.read_bytes(uri) == b"the old bytes"
    assert [n for n in files.list_names(f"{location}/state") if not n.startswith(".")] == ["file.bin"]
    with files.read_chunks(f"{location}/state/none.bin") as missing:
        assert missing is None


@pytest.mark.parametrize("size", [0, 1, CHUNK, 3 * CHUNK + 1])
def test_files_of_any_size_are_read_back_in_pieces_of_at_most_a_chunk(
    spark: Any, location: str, size: int
) -> None:
    files = _files(spark)
    uri = f"{location}/data/{size}.bin"
    data = SNAPSHOT[:size]
    files.write_bytes(uri, data)
    with files.read_chunks(uri) as chunks:
        assert chunks is not None
        read = list(chunks)
    assert b"".join(read) == data and all(0 < len(piece) <= CHUNK for piece in read)


def _streamed_pieces(size: int, piece: int) -> Iterator[bytes]:
    """`size` bytes made a piece at a time, never held together: the baseline's memory."""
    for start in range(0, size, piece):
        yield bytes(min(piece, size - start))


@pytest.mark.parametrize("location", ["viewfs", "s3"], indirect=True)
def test_a_key_index_snapshot_is_saved_and_taken_back_in_a_pieces_memory(spark: Any, location: str) -> None:
    """Beside the index's own columns, saving a snapshot and taking it back costs the driver's
    Python about what streaming the same bytes in pieces costs (through S3A, the S3 server in
    this process counts too): never a second whole copy of the index. Before the spool, the
    encoded bytes and the joined read were each one (issue 49)."""
    files = HadoopFiles(spark)
    files.chunk_bytes = 1 << 20
    snapshots = KeyIndexSnapshots(files, location)
    size = 48 << 20  # under S3A's 64 MiB multipart size: one PUT, as the baseline's
    keys = np.arange(size // 16, dtype=np.int64)
    snapshot = IndexSnapshot(
        {"meta": np.frombuffer(b"{}", np.uint8), "keys0": keys, "rows0": keys[::-1]}, len(keys)
    )

    def peak_of(action: Callable[[], object]) -> int:
        gc.collect()
        tracemalloc.start()
        try:
            action()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    baseline = peak_of(
        lambda: files.replace_chunks(f"{location}/baseline.bin", _streamed_pieces(size, 1 << 20))
    )
    saving = peak_of(lambda: snapshots.save("t", 1, snapshot.write, keys=len(keys)))

    taken: dict[str, Any] = {}

    def take_back() -> None:
        loaded = snapshots.load("t")
        assert loaded is not None
        with loaded.data, np.load(loaded.data) as found:
            taken["keys0"] = found["keys0"]  # one column at a time, as `KeyIndex.restored` reads them

    def read_baseline() -> None:
        with files.read_chunks(f"{location}/baseline.bin") as chunks:
            assert chunks is not None
            for _ in chunks:
                pass

    reading = peak_of(read_baseline)
    loading = peak_of(take_back)
    slack = 24 << 20  # numpy's 16 MiB write buffer and the pieces in flight
    assert saving <= baseline + slack, (
        f"saving peaked at {saving >> 20} MiB, streaming at {baseline >> 20} MiB"
    )
    assert loading <= reading + keys.nbytes + slack, (
        f"taking back peaked at {loading >> 20} MiB, reading at {reading >> 20} MiB, the column {keys.nbytes >> 20} MiB"
    )
    assert np.array_equal(taken["keys0"], keys)
