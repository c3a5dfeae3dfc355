"""Small files on the local disk: written, read and deleted by Python (no JVM round trips), the
way Hadoop's local file system sees them, its checksum files included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from compactor.delta.files import HadoopFiles

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("prefix", ["", "file:"])
def test_a_local_file_is_replaced_whole_and_hadoop_reads_what_python_wrote(
    spark: Any, tmp_path: Path, prefix: str
) -> None:
    files = HadoopFiles(spark)
    target = tmp_path / "state" / "record.json"
    uri = f"{prefix}{target}"
    jvm = spark._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(f"file:{target}")
    fs = hadoop_path.getFileSystem(spark._jsc.hadoopConfiguration())
    out = fs.create(hadoop_path, True)  # an older version, written through Hadoop: with a checksum
    out.write(bytearray(b'{"old": true}'))
    out.close()
    assert (tmp_path / "state" / ".record.json.crc").exists()

    files.write_text(uri, '{"new": true}')
    assert files.read_text(uri) == '{"new": true}'
    assert not (tmp_path / "state" / ".record.json.crc").exists(), "no stale checksum left"
    stream = fs.open(hadoop_path)  # Hadoop reads the new text without a checksum error
    assert str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")) == '{"new": true}'
    stream.close()
    assert sorted(p.name for p in target.parent.iterdir()) == ["record.json"], "no staged file left"

    assert files.exists(uri)
    files.delete(uri)
    assert not files.exists(uri) and files.read_text(uri) is None
    files.delete(uri)  # gone already: nothing happens


def test_a_file_on_another_hadoop_file_system_is_replaced_through_file_context_and_checked(
    spark: Any, tmp_path: Path
) -> None:
    """Through Hadoop's view file system (`viewfs://`, a mount table over a local folder: a Hadoop
    file system other than the local one, reached through the JVM), the file is staged and renamed
    over the target with `FileContext`'s `OVERWRITE` (atomic on HDFS); a rename that cannot happen
    raises instead of passing for done, and leaves no staging file."""
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    hadoop = spark._jsc.hadoopConfiguration()
    hadoop.set("fs.viewfs.mounttable.compactortest.link./data", mounted.as_uri())
    files = HadoopFiles(spark)
    uri = "viewfs://compactortest/data/record.json"
    assert files.local_path(uri) is None, "not a local path: the JVM's file systems write it"
    for n in range(5):
        files.write_text(uri, f"v{n}")
        assert files.read_text(uri) == f"v{n}"
    assert (mounted / "record.json").read_text() == "v4"
    (mounted / "taken").mkdir()
    (mounted / "taken" / "inside").write_text("x")  # a non-empty directory where the file would go
    with pytest.raises(Exception, match=r"rename|exists|directory|Directory"):
        files.write_text("viewfs://compactortest/data/taken", "new")
    left = sorted(p.name for p in mounted.iterdir() if not p.name.startswith("."))
    assert left == ["record.json", "taken"], "no staging file left behind"
