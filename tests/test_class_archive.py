"""The driver JVM's class-data-sharing archive: named for the Java, Spark and jars it was built
for, mapped only when it exists and the user named none, and (on a real JVM) built by `compactor
jars --class-archive` and then used: Spark's classes come from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from compactor.cli.main import main
from compactor.spark import class_archive, session


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("COMPACTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(class_archive.DUMP_ENV, raising=False)
    return tmp_path / "cache"


def test_an_archive_is_named_for_the_java_and_the_jars_it_serves(cache: Path, tmp_path: Path) -> None:
    one, other = tmp_path / "a.jar", tmp_path / "b.jar"
    archive = class_archive.archive_for([one])
    assert archive.parent == cache / class_archive.ARCHIVE_DIR and archive.suffix == ".jsa"
    assert class_archive.archive_for([one]) == archive, "the same inputs, the same name"
    assert class_archive.archive_for([one, other]) != archive, "other jars, another archive"


def test_the_archive_is_mapped_only_when_built_and_never_over_the_users_own(cache: Path) -> None:
    jars = ["/jars/delta.jar"]
    given = "-Dlog4j2.configurationFile=x"
    assert class_archive.java_options(jars, given) == given, "none built: the options as given"
    archive = class_archive.archive_for(jars)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"")
    mapped = class_archive.java_options(jars, given)
    assert mapped.startswith(given) and f"-XX:SharedArchiveFile={archive} -Xshare:auto" in mapped
    assert class_archive.java_options(["/jars/other.jar"], given) == given, "built for other jars"
    own = "-XX:SharedArchiveFile=/mine.jsa"
    assert class_archive.java_options(jars, own) == own, "the user's archive stays theirs"


def test_the_builders_child_writes_the_archive_instead(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(class_archive.DUMP_ENV, "/scratch/new.jsa")
    assert class_archive.java_options(["/jars/delta.jar"], "") == (
        "-XX:ArchiveClassesAtExit=/scratch/new.jsa -Xlog:cds=off -Xlog:cds+dynamic=off"
    )


@pytest.mark.integration
def test_compactor_jars_builds_the_archive_and_a_driver_loads_spark_from_it(
    cache: Path, tmp_path: Path
) -> None:
    built = CliRunner().invoke(main, ["jars", "--spark-only", "--class-archive"])
    assert built.exit_code == 0, built.output
    archive = class_archive.archive_for([str(p) for p in session.jars_for(())])
    assert archive.is_file() and archive.stat().st_size > 10 << 20
    assert f"class archive: {archive}" in built.output
    loads = tmp_path / "class-load.log"
    probe = (
        "from compactor.spark import session, class_archive as a;"
        f"a.java_options = (lambda f: lambda jars, given: f(jars, given) + ' -Xlog:class+load=info:file={loads}')"
        "(a.java_options);"
        "s = session.build_spark('probe', master='local[1]'); s.range(1).count(); s.stop()"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=300, capture_output=True)
    for name in ("org.apache.spark.SparkContext ", "io.delta.sql.DeltaSparkSessionExtension "):
        lines = [line for line in loads.read_text().splitlines() if name in line]  # Spark's, then ours
        assert lines and "shared objects file (top)" in lines[0], lines
