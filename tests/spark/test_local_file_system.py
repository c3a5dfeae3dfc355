"""The job's `FileContext` local file system: Hadoop's outcomes, without starting a process.

Processes are counted by the JVM itself: a Java Flight Recorder recording of `jdk.ProcessStart`
around the calls, read back in the same JVM. Hadoop's own local file system, counted the same
way, starts some: the count can fail.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from compactor.spark import local_file_system

HADOOPS_OWN = "org.apache.hadoop.fs.local.LocalFs"


@pytest.fixture(scope="module")
def java(spark: Any) -> Any:
    return spark._jvm


@contextmanager
def processes_started(java: Any, scratch: Path) -> Iterator[list[str]]:
    """The commands the JVM starts inside the block, listed once it ends."""
    recording = java.jdk.jfr.Recording()
    recording.enable("jdk.ProcessStart")
    recording.start()
    started: list[str] = []
    try:
        yield started
    finally:
        recording.stop()
        dump = scratch / "processes.jfr"
        recording.dump(java.java.io.File(str(dump)).toPath())
        recording.close()
        for event in java.jdk.jfr.consumer.RecordingFile.readAllEvents(java.java.io.File(str(dump)).toPath()):
            started.append(str(event.getString("command")))


def file_context(spark: Any, implementation: str | None) -> Any:
    """A `FileContext` on `file:` with the session's Hadoop settings, or with `implementation` as
    its file system."""
    java = spark._jvm
    conf = java.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())
    if implementation is not None:
        conf.set("fs.AbstractFileSystem.file.impl", implementation)
    return java.org.apache.hadoop.fs.FileContext.getFileContext(java.java.net.URI("file:///"), conf)


def write_and_rename(spark: Any, context: Any, folder: Path) -> None:
    """What Delta's log store does for a commit: a temporary file created with a permission,
    renamed onto the commit's name unless that exists."""
    java, gateway = spark._jvm, spark.sparkContext._gateway
    hadoop = java.org.apache.hadoop.fs
    flags = java.java.util.EnumSet.of(hadoop.CreateFlag.CREATE)
    temporary = hadoop.Path(f"file:{folder}/.00000.json.tmp")
    permission = java.org.apache.hadoop.fs.permission.FsPermission.createImmutable(0o640)
    options = gateway.new_array(hadoop.Options.CreateOpts, 1)
    options[0] = hadoop.Options.CreateOpts.perms(permission)
    stream = context.create(temporary, flags, options)
    stream.write(bytearray(b'{"commitInfo":{}}\n'))
    stream.close()
    renames = gateway.new_array(hadoop.Options.Rename, 1)
    renames[0] = hadoop.Options.Rename.NONE
    context.rename(temporary, hadoop.Path(f"file:{folder}/00000.json"), renames)


def test_the_sessions_file_context_is_ours(spark: Any) -> None:
    context = file_context(spark, None)
    assert context.getDefaultFileSystem().getClass().getName() == local_file_system.CLASS_NAME


@pytest.mark.parametrize(
    ("implementation", "spawns"), [(local_file_system.CLASS_NAME, False), (HADOOPS_OWN, True)]
)
def test_a_commits_write_and_rename_start_a_process_only_with_hadoops_own(
    spark: Any, java: Any, tmp_path: Path, implementation: str, spawns: bool
) -> None:
    context = file_context(spark, implementation)
    with processes_started(java, tmp_path) as started:
        write_and_rename(spark, context, tmp_path)
    assert (tmp_path / "00000.json").read_bytes() == b'{"commitInfo":{}}\n'
    assert not (tmp_path / ".00000.json.tmp").exists()
    # the permission asked for, as Hadoop's chmod sets it; the checksum file beside it
    assert stat.S_IMODE(os.stat(tmp_path / "00000.json").st_mode) == 0o640
    assert (tmp_path / ".00000.json.crc").is_file()
    commands = {command.split()[0] for command in started}
    assert commands == ({"chmod", "readlink"} if spawns else set())


@pytest.mark.parametrize("implementation", [local_file_system.CLASS_NAME, HADOOPS_OWN])
def test_a_rename_onto_an_existing_file_is_refused_as_by_hadoop(
    spark: Any, java: Any, tmp_path: Path, implementation: str
) -> None:
    context = file_context(spark, implementation)
    (tmp_path / "00000.json").write_text("the winner's commit\n")
    with pytest.raises(Exception, match="FileAlreadyExistsException"):
        write_and_rename(spark, context, tmp_path)
    assert (tmp_path / "00000.json").read_text() == "the winner's commit\n"


def test_a_symbolic_link_is_still_one(spark: Any, java: Any, tmp_path: Path) -> None:
    """A link named without a scheme takes Hadoop's own path, and is reported as a link."""
    (tmp_path / "target.json").write_text("x")
    (tmp_path / "link.json").symlink_to(tmp_path / "target.json")
    context = file_context(spark, local_file_system.CLASS_NAME)
    status = context.getFileLinkStatus(java.org.apache.hadoop.fs.Path(str(tmp_path / "link.json")))
    assert status.isSymlink()
    assert str(status.getSymlink().toUri().getPath()) == str(tmp_path / "target.json")
    plain = context.getFileLinkStatus(java.org.apache.hadoop.fs.Path(f"file:{tmp_path}/target.json"))
    assert not plain.isSymlink() and plain.getLen() == 1


def test_a_missing_file_is_not_found(spark: Any, java: Any, tmp_path: Path) -> None:
    context = file_context(spark, local_file_system.CLASS_NAME)
    with pytest.raises(Exception, match="FileNotFoundException"):
        context.getFileLinkStatus(java.org.apache.hadoop.fs.Path(f"file:{tmp_path}/absent.json"))


@pytest.mark.parametrize(
    ("master", "given", "expected"),
    [
        ("local[2]", {}, {local_file_system.SETTING: local_file_system.CLASS_NAME}),
        ("spark://host:7077", {}, {}),  # executors elsewhere may lack the jar
        ("local[2]", {local_file_system.SETTING: HADOOPS_OWN}, {}),  # the user's choice stands
    ],
)
def test_set_for_local_masters_unless_the_user_chose(
    java: Any, master: str, given: dict[str, str], expected: dict[str, str]
) -> None:
    assert local_file_system.settings(java, {"spark.master": master, **given}) == expected


def test_not_set_where_the_jvm_cannot_load_it(monkeypatch: pytest.MonkeyPatch, java: Any) -> None:
    loads: Callable[[Any, str], bool] = lambda java, name: False  # noqa: E731
    monkeypatch.setattr(local_file_system.jvm, "driver_loads", loads)
    assert local_file_system.settings(java, {"spark.master": "local[2]"}) == {}


def test_delta_s_log_store_commits_without_a_process(spark: Any, java: Any, tmp_path: Path) -> None:
    """A commit as Delta writes one on `file:` (its HDFSLogStore, through the session's
    FileContext), and the put-if-absent that keeps a second writer of the version out."""
    conf = spark._jsc.hadoopConfiguration()
    store = java.io.delta.storage.HDFSLogStore(conf)
    (tmp_path / "_delta_log").mkdir()
    commit = java.org.apache.hadoop.fs.Path(f"file:{tmp_path}/_delta_log/00000000000000000000.json")
    lines = java.java.util.ArrayList()
    lines.add('{"commitInfo":{}}')
    with processes_started(java, tmp_path) as started:
        store.write(commit, lines.iterator(), False, conf)
        with pytest.raises(Exception, match="FileAlreadyExistsException"):
            store.write(commit, lines.iterator(), False, conf)
    assert started == []
    assert (tmp_path / "_delta_log" / "00000000000000000000.json").read_text() == '{"commitInfo":{}}\n'
