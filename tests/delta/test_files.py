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
