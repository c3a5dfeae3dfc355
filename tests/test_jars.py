"""Jar resolution as a company machine does it: its own Maven settings, offline, the spark-submit line."""

from __future__ import annotations

import functools
import http.server
import shlex
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from compactor.cli.main import main
from compactor.errors import DependencyResolutionError
from compactor.spark import conditional_log_store, hash_counter, jvm, local_file_system, session

SMALL = jvm.Artifact("org.slf4j:slf4j-api:1.7.36")  # one jar, no dependencies, in every Maven cache here


def test_maven_runs_with_the_users_own_settings_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(jvm.MAVEN_SETTINGS_ENV, raising=False)
    monkeypatch.delenv(jvm.OFFLINE_ENV, raising=False)
    assert jvm.maven_options() == [], "no -s: Maven reads ~/.m2/settings.xml itself"
    settings = tmp_path / "settings.xml"
    settings.write_text("<settings/>")
    monkeypatch.setenv(jvm.MAVEN_SETTINGS_ENV, str(settings))
    monkeypatch.setenv(jvm.OFFLINE_ENV, "1")
    assert jvm.maven_options() == ["-s", str(settings), "-o"]
    monkeypatch.setenv(jvm.MAVEN_SETTINGS_ENV, str(tmp_path / "missing.xml"))
    with pytest.raises(
        DependencyResolutionError, match=r"COMPACTOR_MAVEN_SETTINGS=.*missing.xml: no such file"
    ):
        jvm.maven_options()


def test_spark_submit_args_bring_the_jars_and_leave_out_what_spark_ships(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(jvm, "shipped_by_spark", lambda name, _: [f"org.shipped:{name}-dep"])
    monkeypatch.setattr(jvm, "spark_jars", lambda: [Path("/c/delta.jar"), Path("/c/kafka.jar")])
    monkeypatch.setattr(jvm, "s3_jars", lambda: [Path("/c/hadoop-aws.jar")])
    monkeypatch.setattr(conditional_log_store, "jar", lambda: Path("/c/compactor-logstore.jar"))
    monkeypatch.setattr(hash_counter, "jar", lambda: Path("/c/compactor-row-hash-sum.jar"))
    monkeypatch.setattr(local_file_system, "jar", lambda: Path("/c/compactor-local-fs.jar"))
    ours = ["--jars", "/c/compactor-row-hash-sum.jar,/c/compactor-local-fs.jar"]
    log_store = [
        "--conf", "spark.hadoop.fs.s3a.input.stream.type=classic",
        "--conf", "spark.sql.streaming.checkpointFileManagerClass="
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
        "--conf", f"spark.delta.logStore.s3a.impl={conditional_log_store.CLASS_NAME}",
        "--conf", f"spark.delta.logStore.s3.impl={conditional_log_store.CLASS_NAME}",
    ]  # fmt: skip
    extensions = ["--conf", f"spark.sql.extensions={session.DELTA_EXTENSION}"]
    catalog = ["--conf", f"spark.sql.catalog.spark_catalog={session.DELTA_CATALOG}"]
    assert session.spark_submit_args() == [
        "--packages", f"{jvm.DELTA_SPARK},{jvm.SPARK_SQL_KAFKA}",
        "--exclude-packages", "org.shipped:spark-dep",
        *ours, *extensions, *catalog,
    ]  # fmt: skip
    assert (
        session.spark_submit_args(["s3a://b/w"])[1]
        == f"{jvm.DELTA_SPARK},{jvm.SPARK_SQL_KAFKA},{jvm.HADOOP_AWS}"
    )
    assert session.spark_submit_args(["s3a://b/w"])[3] == "org.shipped:s3-dep,org.shipped:spark-dep"
    # our classes are no Maven artifact: they go as jars, the log store with the settings that choose it
    assert session.spark_submit_args(["s3a://b/w"])[4:6] == [
        "--jars", "/c/compactor-row-hash-sum.jar,/c/compactor-local-fs.jar,/c/compactor-logstore.jar"
    ]  # fmt: skip
    assert session.spark_submit_args(["s3a://b/w"])[-len(log_store) :] == log_store
    assert session.spark_submit_args(["/local"], local_jars=True) == [
        "--jars", "/c/delta.jar,/c/kafka.jar,/c/compactor-row-hash-sum.jar,/c/compactor-local-fs.jar", *extensions, *catalog
    ]  # fmt: skip
    printed = CliRunner().invoke(main, ["jars", "--spark-submit-args", "--local-jars", "--s3"])
    assert printed.exit_code == 0, printed.output
    assert shlex.split(printed.stdout) == [
        "--jars",
        "/c/delta.jar,/c/kafka.jar,/c/compactor-row-hash-sum.jar,/c/compactor-local-fs.jar,/c/hadoop-aws.jar,"
        "/c/compactor-logstore.jar",
        *extensions,
        *catalog,
        *log_store,
    ]


def test_a_conf_that_is_not_key_value_is_refused_in_one_line() -> None:
    result = CliRunner().invoke(main, ["coverage", "--table", "t", "--conf", "spark.ui.enabled"])
    assert result.exit_code == 2
    assert "'spark.ui.enabled' is not KEY=VALUE" in result.output


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """A company Maven mirror on 127.0.0.1, serving this machine's Maven repository."""
    local = Path.home() / ".m2" / "repository"
    requested: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            requested.append(self.path)

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(local))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", requested
    finally:
        server.shutdown()
        server.server_close()


def settings_file(tmp_path: Path, mirror_url: str) -> Path:
    path = tmp_path / "company-settings.xml"
    path.write_text(
        f"<settings><localRepository>{tmp_path / 'm2'}</localRepository><mirrors><mirror>"
        f"<id>company</id><mirrorOf>*</mirrorOf><url>{mirror_url}</url></mirror></mirrors></settings>"
    )
    return path


@pytest.mark.integration
def test_a_company_mirror_from_the_maven_settings_serves_the_jars(
    mirror: tuple[str, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, requested = mirror
    monkeypatch.setenv("COMPACTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(jvm.MAVEN_SETTINGS_ENV, str(settings_file(tmp_path, url)))
    monkeypatch.delenv(jvm.OFFLINE_ENV, raising=False)
    jars = jvm.resolve("probe", (SMALL,))
    assert [p.name for p in jars] == ["slf4j-api-1.7.36.jar"]
    assert any(path.endswith("/org/slf4j/slf4j-api/1.7.36/slf4j-api-1.7.36.jar") for path in requested)
    assert jvm.modules("probe", (SMALL,)) == ["org.slf4j:slf4j-api"]


@pytest.mark.integration
def test_offline_uses_the_cache_and_names_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COMPACTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(jvm.OFFLINE_ENV, "1")
    # an empty local repository and a mirror nobody serves: nothing may come from anywhere
    monkeypatch.setenv(jvm.MAVEN_SETTINGS_ENV, str(settings_file(tmp_path, "http://127.0.0.1:9/")))
    with pytest.raises(DependencyResolutionError) as refused:
        jvm.resolve("probe", (SMALL,))
    message = str(refused.value)
    assert message.startswith(
        "COMPACTOR_OFFLINE=1 and the jars for org.slf4j:slf4j-api:1.7.36 are neither in "
    )
    assert "compactor jars" in message
    assert "offline" in capsys.readouterr().err, "the resolution said what it was doing"

    # with the cache filled (here by a copy from a connected machine), offline needs no Maven at all
    monkeypatch.delenv(jvm.OFFLINE_ENV)
    monkeypatch.delenv(jvm.MAVEN_SETTINGS_ENV)
    online = jvm.resolve("probe", (SMALL,))
    monkeypatch.setenv(jvm.OFFLINE_ENV, "1")
    monkeypatch.setattr(jvm.shutil, "which", lambda _: None)
    assert jvm.resolve("probe", (SMALL,)) == online
