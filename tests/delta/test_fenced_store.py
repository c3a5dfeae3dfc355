"""A fenced Spark store writes nothing: after its shard's lease was lost, no purge, sub-partition
delete, VACUUM, key index snapshot or recorded config reaches the table (real Spark and Delta)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from compactor.config.sub_partitions import SubPartitionConfig
from compactor.config.vacuum import VacuumConfig
from compactor.delta.spark_store import SparkTableStore
from compactor.errors import Fenced
from tests.delta.test_direct_commit import rust_load

pytestmark = pytest.mark.integration


def test_a_fenced_store_refuses_every_write_and_the_table_is_unchanged(spark: Any, warehouse: Path) -> None:
    segment = rust_load(warehouse, "s0", 0)
    store = SparkTableStore(spark, str(warehouse))
    before = store.latest_version("t")
    store.fence()
    writes = {
        "purge": lambda: store.purge([segment]),
        "vacuum": lambda: store.vacuum("t", VacuumConfig()),
        "snapshot": lambda: store.save_key_index("t", before, b"index", 1),
        "config": lambda: store.record_config("t", "{}"),
        "sub-partition delete": lambda: store.delete_sub_partition(
            "t", SubPartitionConfig(column="k"), "1", [segment]
        ),
    }
    for name, write in writes.items():
        with pytest.raises(Fenced, match="lease was lost"):
            write()
            pytest.fail(f"{name} was not refused")
    assert store.latest_version("t") == before, "no commit reached the table"
    assert not (warehouse / "_compactor").exists(), "nothing written under _compactor/"


def test_a_commit_whose_bookkeeping_fails_afterwards_is_still_reported_committed(
    spark: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by bench/years.py: with the object store gone right after a merge committed, the
    store's bookkeeping after the commit raised, and a merge Delta holds was announced FAILED."""
    from compactor.config.loading import load_config
    from compactor.domain.plans import make_plan

    segments = [rust_load(warehouse, f"s{i}", i) for i in range(2)]
    store = SparkTableStore(spark, str(warehouse))

    def unreachable(*args: Any) -> None:
        raise OSError("s3a://warehouse/t/_delta_log: connection refused")

    monkeypatch.setattr(store._plan_ids, "settle", unreachable)
    settings = load_config({"defaults": {"rules": [{"rule": "minor"}]}}).for_table("t")
    commit = store.commit(make_plan("t", "minor", segments), settings)
    assert commit.version == store.latest_version("t") == 2
