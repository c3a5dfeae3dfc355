"""Key index snapshots on a warehouse through the job's file systems: the newest is read back,
older ones are deleted once a newer one is whole, and status reads what each holds."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from compactor.delta.files import HadoopFiles
from compactor.delta.warehouse.key_index_snapshots import KeyIndexSnapshots

pytestmark = pytest.mark.integration


def read_back(snapshots: KeyIndexSnapshots, table: str = "t") -> tuple[int, bytes] | None:
    """The newest snapshot's version and bytes, its spool closed."""
    loaded = snapshots.load(table)
    if loaded is None:
        return None
    with loaded.data:
        return loaded.version, loaded.data.read()


def test_the_newest_snapshot_is_kept_and_read_back(spark: Any, tmp_path: Path) -> None:
    snapshots = KeyIndexSnapshots(HadoopFiles(spark), tmp_path)
    assert snapshots.load("t") is None and snapshots.describe("t") is None
    snapshots.save("t", 3, lambda out: out.write(b"three"), keys=30)
    snapshots.save("t", 5, lambda out: out.write(b"five!"), keys=50)
    folder = tmp_path / "_compactor" / "key-index" / "t"
    assert sorted(n for n in os.listdir(folder) if not n.startswith(".")) == [
        f"{5:020d}.json",
        f"{5:020d}.npz",
    ], "the older snapshot and its facts are gone"
    assert read_back(snapshots) == (5, b"five!")
    facts = snapshots.describe("t")
    assert facts is not None and (facts["version"], facts["keys"], facts["bytes"]) == (5, 50, 5)
    snapshots.save(
        "t", 5, lambda out: out.write(b"again"), keys=51
    )  # the same version taken again: replaced whole
    assert read_back(snapshots) == (5, b"again")
