"""Files on the warehouse's file system, through Hadoop: local disks, HDFS, S3, ADLS, GCS alike.

Every read and write of table data goes through Spark; the few small files the
compactor reads or writes itself (Delta's commit JSON, its own state) go
through the same Hadoop file systems, with the same credentials and settings
the user gave Spark (`spark.hadoop.fs.s3a.*`, core-site.xml, the environment).
"""

from __future__ import annotations

import base64
import contextlib
import os
import uuid
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

_CLASSES: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()

# The most a file's bytes take in one py4j call (base64 adds a third): py4j sends a call as one
# line of text, which the driver's JVM holds whole; a 280 MB key index snapshot sent whole was
# ~373 MB of text in a 1 GiB JVM (issue 49).
CHUNK_BYTES = 4 << 20
# A Parquet file's tail read first for its footer: a table of a few dozen columns and row groups
# has a footer of a few KiB, so one read nearly always holds it.
FOOTER_GUESS_BYTES = 64 << 10


def jvm_class(jvm: Any, name: str) -> Any:
    """A JVM class by its full name, looked up once per JVM, its static members each once too
    (`StaticMembers`): each step of `jvm.org.apache...` is a round trip to the JVM (seven for a
    Delta class), a cost paid on every merge otherwise."""
    known = _CLASSES.setdefault(jvm, {})
    found = known.get(name)
    if found is None:
        java_class = jvm
        for part in name.split("."):
            java_class = getattr(java_class, part)
        found = known[name] = StaticMembers(java_class)
    return found


class StaticMembers:
    """A JVM class whose static members (methods, nested classes, enum constants, a Scala
    object's `MODULE$`) are looked up once: py4j's class asks the JVM what a name is at each
    access, a round trip costing as much CPU as the call itself (about 80 us here, both
    processes together). Only for members that never change; a mutable static field would be
    read once. Calling it calls the class's constructor."""

    __slots__ = ("_members", "java_class")

    def __init__(self, java_class: Any) -> None:
        self.java_class = java_class
        self._members: dict[str, Any] = {}

    def __call__(self, *args: Any) -> Any:
        return self.java_class(*args)

    def __getattr__(self, name: str) -> Any:
        found = self._members.get(name)
        if found is None:
            found = self._members[name] = getattr(self.java_class, name)
        return found


def scala_items(jvm: Any, seq: Any) -> list[Any]:
    """The items of a Scala collection, each read by index through a Java view: iterating it
    through py4j would make pyspark convert the iterator's end (a JVM exception) on every call."""
    view = jvm_class(jvm, "scala.jdk.javaapi.CollectionConverters").asJava(seq)
    return [view.get(i) for i in range(view.size())]


def scala_seq(jvm: Any, items: Sequence[Any]) -> Any:
    """A Python sequence as the immutable Scala `Seq` Spark's and Delta's APIs take."""
    values = jvm_class(jvm, "java.util.ArrayList")()
    for item in items:
        values.add(item)
    return jvm_class(jvm, "scala.jdk.javaapi.CollectionConverters").asScala(values).toSeq()


def scala_none(jvm: Any) -> Any:
    """Scala's `None`, one proxy per JVM: `Option.empty()` is a round trip at each call, and
    another when its proxy is released."""
    return getattr(jvm_class(jvm, "scala.None$"), "MODULE$")


def scala_map(jvm: Any, values: dict[str, Any]) -> Any:
    """A Python dict as the immutable Scala map Spark's and Delta's APIs take."""
    return jvm_class(jvm, "org.apache.spark.api.python.PythonUtils").toScalaMap(values)


class HadoopFiles:
    """Small-file operations on any URI Hadoop can open (`file:`, `s3a://`, `abfss://`, `gs://`).

    A file the JVM reads or writes crosses py4j in pieces of at most `chunk_bytes`, so neither
    the driver's JVM nor this process ever holds a whole large file as one py4j message."""

    def __init__(self, spark: SparkSession, chunk_bytes: int = CHUNK_BYTES) -> None:
        if chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes must be positive, not {chunk_bytes}")
        self.chunk_bytes = chunk_bytes
        self._jvm: Any = spark._jvm
        self._gateway: Any = spark.sparkContext._gateway
        self._conf = spark._jsc.hadoopConfiguration()
        # finding a path's file system is a round trip too: once per scheme and authority (as
        # Hadoop caches them), so a file lookup costs two round trips, not nine
        self._path_class = jvm_class(self._jvm, "org.apache.hadoop.fs.Path")
        self._io_utils = jvm_class(self._jvm, "org.apache.commons.io.IOUtils")
        self._systems: dict[tuple[str, str], Any] = {}
        self._default_local: bool | None = None  # is the default file system the local disk?

    def _fs_path(self, uri: str) -> tuple[Any, Any]:
        path = self._path_class(uri)
        where = urlsplit(uri)[:2]  # (scheme, authority)
        fs = self._systems.get(where)
        if fs is None:
            fs = self._systems[where] = path.getFileSystem(self._conf)
        return fs, path

    def local_path(self, uri: str) -> str | None:
        """The path of a file on this machine's disk (a `file:` URI, or a path without a scheme
        where Hadoop's default file system is the local one), taken literally as Hadoop does."""
        parts = urlsplit(uri)
        if parts.scheme == "" and self._default_local is None:
            fs, _ = self._fs_path(uri)
            self._default_local = str(fs.getUri().getScheme()) == "file"
        local = parts.scheme == "file" or (parts.scheme == "" and self._default_local)
        return parts.path if local and parts.netloc in ("", "localhost") else None

    def exists(self, uri: str) -> bool:
        local = self.local_path(uri)
        if local is not None:
            return os.path.exists(local)
        fs, path = self._fs_path(uri)
        return bool(fs.exists(path))

    def size(self, uri: str) -> int:
        """The file's length in bytes."""
        local = self.local_path(uri)
        if local is not None:
            return os.path.getsize(local)
        fs, path = self._fs_path(uri)
        return int(fs.getFileStatus(path).getLen())

    def read_text(self, uri: str) -> str | None:
        """The file's text, or None when there is no such file."""
        data = self.read_bytes(uri)
        return None if data is None else data.decode("utf-8")

    def read_bytes(self, uri: str) -> bytes | None:
        """The file's bytes, or None when there is no such file."""
        local = self.local_path(uri)
        if local is not None:  # no round trips to the JVM for a file on this machine's disk
            try:
                with open(local, "rb") as f:
                    return f.read()
            except FileNotFoundError:
                return None
        with self.read_chunks(uri) as chunks:
            return None if chunks is None else b"".join(chunks)

    @contextlib.contextmanager
    def read_chunks(self, uri: str) -> Iterator[Iterator[bytes] | None]:
        """`with files.read_chunks(uri) as chunks:` the file's bytes in pieces of at most
        `chunk_bytes`, in order (None when there is no such file); the file is open until the
        block ends.

        Through the JVM, each piece is read into one buffer the JVM keeps and crosses py4j as
        base64 text, which Python decodes in C (py4j decodes a byte array it returns a byte at a
        time, into a list of ints: minutes and gigabytes for a file of hundreds of megabytes)."""
        local = self.local_path(uri)
        if local is not None:
            try:
                handle = open(local, "rb")  # noqa: SIM115 - closed when the block ends
            except FileNotFoundError:
                yield None
                return
            with handle:
                yield iter(lambda: handle.read(self.chunk_bytes), b"")
            return
        fs, path = self._fs_path(uri)
        try:
            stream = fs.open(path)
        except Exception as exc:  # py4j wraps java.io.FileNotFoundException
            if "FileNotFoundException" in type(exc).__name__ or "FileNotFoundException" in str(exc):
                yield None
                return
            raise
        try:
            yield self._jvm_chunks(stream)
        finally:
            stream.close()

    def _jvm_chunks(self, stream: Any) -> Iterator[bytes]:
        size = self.chunk_bytes
        jvm = self._jvm
        # a buffer the JVM keeps (a byte[] made from Python would be copied back as a value)
        buffer = jvm_class(jvm, "java.nio.ByteBuffer").allocate(size)
        channel = jvm_class(jvm, "java.nio.channels.Channels").newChannel(stream)
        encoder = jvm_class(jvm, "java.util.Base64").getEncoder()
        ascii_text = jvm_class(jvm, "java.nio.charset.StandardCharsets").US_ASCII
        while True:
            buffer.clear()
            read = int(self._io_utils.read(channel, buffer))  # fills it; less only at the end
            if read <= 0:
                return
            buffer.flip()
            yield base64.b64decode(str(ascii_text.decode(encoder.encode(buffer)).toString()))
            if read < size:
                return

    def read_tail(self, uri: str, size: int, length: int) -> bytes:
        """The last `length` bytes of the file of `size` bytes (all of it when shorter): one
        ranged read, however large the file."""
        start = max(0, size - length)
        local = self.local_path(uri)
        if local is not None:
            with open(local, "rb") as f:
                f.seek(start)
                return f.read()
        fs, path = self._fs_path(uri)
        stream = fs.open(path)
        try:
            stream.seek(start)
            return b"".join(self._jvm_chunks(stream))
        finally:
            stream.close()

    def parquet_footer(self, uri: str, size: int) -> pq.FileMetaData:
        """The footer of the Parquet file of `size` bytes at `uri`, read from its tail alone."""
        tail = self.read_tail(uri, size, FOOTER_GUESS_BYTES)
        if len(tail) < 12 or tail[-4:] != b"PAR1":
            raise ValueError(f"{uri}: not a Parquet file (no footer magic in its last {len(tail)} bytes)")
        footer_length = int.from_bytes(tail[-8:-4], "little")
        if footer_length + 8 > len(tail):
            tail = self.read_tail(uri, size, footer_length + 8)
        # the footer alone between the magic words reads as a file with no row data to pyarrow
        framed = b"PAR1" + tail[-(footer_length + 8) :]
        return pq.read_metadata(pa.BufferReader(framed))

    def write_text(self, uri: str, text: str) -> None:
        """`replace_bytes` of the text in UTF-8."""
        self.replace_bytes(uri, text.encode("utf-8"))

    def replace_bytes(self, uri: str, data: bytes) -> None:
        """`replace_chunks` of the bytes as one piece (sent on in pieces of `chunk_bytes`)."""
        self.replace_chunks(uri, (data,))

    def replace_chunks(self, uri: str, chunks: Iterable[bytes | bytearray | memoryview]) -> int:
        """Write the file whole from its pieces, in order, replacing it in one step: readers see
        the old bytes or the new, never no file, nor part of the new. Returns the bytes written.
        Local disks: written by Python (no JVM round trips) and renamed over the target; object
        stores: one object, seen only once whole (one PUT, or a multipart upload completed when
        the stream closes); HDFS and other file systems: a temporary file renamed over the target
        by Hadoop's `FileContext` (`Rename.OVERWRITE`: atomic on HDFS; other file systems replace
        as Hadoop does for them), which fails loudly rather than report a rename that did not
        happen. The temporary file's name is the writer's own: two jobs may write one file at
        once (the warehouse's shard record, at their start), and the last rename wins. Each
        piece crosses py4j in parts of at most `chunk_bytes`."""
        local = self.local_path(uri)
        if local is not None:
            return _write_local(local, chunks)
        fs, path = self._fs_path(uri)
        scheme = path.toUri().getScheme() or "file"
        target = path if scheme in {"s3a", "s3", "gs", "abfs", "abfss", "wasb", "wasbs"} else None
        staging = target or self._path_class(f"{uri}.{uuid.uuid4().hex}.tmp")
        out = fs.create(staging, True)
        try:
            written = self._send(out, chunks)
        except BaseException:
            _abandon(out, close=target is None)
            if target is None:
                fs.delete(staging, False)
            raise
        try:
            out.close()  # an object store's file appears whole here
            if target is not None:
                return written
            self._replace(staging, path)
        except Exception:
            if target is None:
                fs.delete(staging, False)  # the target is as it was: no staging file left behind
            raise
        return written

    def _send(self, out: Any, chunks: Iterable[bytes | bytearray | memoryview]) -> int:
        """Write the pieces to the JVM output stream `out`, at most `chunk_bytes` per call."""
        written = 0
        for chunk in chunks:
            view = memoryview(chunk).cast("B")
            for start in range(0, len(view), self.chunk_bytes):
                part = view[start : start + self.chunk_bytes]
                out.write(bytes(part))  # py4j sends bytes as a byte[], base64 in its command
                written += len(part)
        return written

    def _replace(self, staging: Any, path: Any) -> None:
        """`staging` renamed over `path` (HDFS: in one atomic step; elsewhere Hadoop's own
        replacement), or an exception: a rename that fails is never taken for done."""
        files = jvm_class(self._jvm, "org.apache.hadoop.fs.FileContext")
        context = files.getFileContext(path.toUri(), self._conf)
        rename = jvm_class(self._jvm, "org.apache.hadoop.fs.Options$Rename")
        options = self._gateway.new_array(rename, 1)
        options[0] = rename.OVERWRITE
        context.rename(staging, path, options)

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Write a new file whole (a data file no reader sees until a commit names it: no staging)."""
        local = self.local_path(uri)
        if local is not None:
            os.makedirs(os.path.dirname(local), exist_ok=True)
            with open(local, "xb") as f:
                f.write(data)
            return
        fs, path = self._fs_path(uri)
        out = fs.create(path, False)
        try:
            self._send(out, (data,))
        finally:
            out.close()

    def delete(self, uri: str) -> None:
        """Delete the file (nothing when it is gone already)."""
        local = self.local_path(uri)
        if local is not None:
            for gone in (local, _checksum_of(local)):  # and Hadoop's checksum of it
                with contextlib.suppress(FileNotFoundError):
                    os.remove(gone)
            return
        fs, path = self._fs_path(uri)
        fs.delete(path, False)

    def delete_tree(self, uri: str) -> None:
        """Delete a directory and everything under it (nothing when it is gone already)."""
        fs, path = self._fs_path(uri)
        fs.delete(path, True)

    def list_names(self, uri: str) -> list[str]:
        """Names of the entries directly under a directory (empty when it does not exist)."""
        fs, path = self._fs_path(uri)
        if not fs.exists(path):
            return []
        # one round trip per entry: list directories with few entries (a warehouse's tables),
        # never a busy `_delta_log` (the log reader finds versions without listing)
        return [str(status.getPath().getName()) for status in fs.listStatus(path)]


def _write_local(path: str, chunks: Iterable[bytes | bytearray | memoryview]) -> int:
    """Written beside the target and renamed over it in one step (a crash leaves the old file
    or the new one, never neither); a checksum file Hadoop left for an older version goes, or
    Hadoop's reads would find the new text does not match it. Returns the bytes written."""
    directory, name = os.path.split(path)
    os.makedirs(directory, exist_ok=True)
    staging = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
    written = 0
    try:
        with open(staging, "xb") as f:
            for chunk in chunks:
                written += f.write(chunk)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(staging)
        raise
    os.replace(staging, path)
    with contextlib.suppress(FileNotFoundError):
        os.remove(_checksum_of(path))
    return written


def _abandon(out: Any, close: bool) -> None:
    """Drop a JVM output stream whose writing failed, publishing none of it: S3A's stream is
    `Abortable` (its upload is abandoned); another object store's stream is left unclosed, as
    closing it would complete its upload with part of the file; a staging file (`close`) is
    closed, to be deleted."""
    try:
        out.abort()
    except Exception:  # Hadoop's UnsupportedOperationException: the stream cannot abort
        if close:
            with contextlib.suppress(Exception):
                out.close()


def _checksum_of(path: str) -> str:
    """Where Hadoop's local file system keeps a file's checksum."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.crc")
