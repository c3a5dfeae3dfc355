"""One endpoint for the shards a job runs: each sample labelled with its shard, a shard handed
on leaves the endpoint."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from compactor.observe.metrics.shard_metrics import ShardMetrics


def samples(metrics: ShardMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_each_shards_samples_carry_its_label_in_one_family() -> None:
    metrics = ShardMetrics()
    metrics.add(0).on_events(3)
    metrics.add(2).on_events(5)
    metrics.add(2).on_dead_letter("bad_schema")  # a shard gained again starts afresh
    text = generate_latest(metrics.registry).decode()
    assert text.count("# TYPE compactor_events_total counter") == 1, "one family, not one per shard"
    assert samples(metrics, "compactor_events_total") == {(("shard", "0"),): 3.0, (("shard", "2"),): 0.0}
    assert samples(metrics, "compactor_dead_letters_total") == {
        (("reason", "bad_schema"), ("shard", "2")): 1.0
    }


def test_a_shard_handed_on_leaves_the_endpoint() -> None:
    metrics = ShardMetrics()
    metrics.add(0).on_events(1)
    metrics.add(1).on_events(1)
    metrics.remove(0)
    assert samples(metrics, "compactor_events_total") == {(("shard", "1"),): 1.0}


def test_the_driver_s_memory_is_told_by_allocator_with_no_shard_label() -> None:
    """Live C blocks and Arrow's pool follow what the driver holds (glibc's mallinfo2 on Linux)."""
    pa = pytest.importorskip("pyarrow")
    metrics = ShardMetrics()

    def now() -> dict[str, float]:
        return {dict(k)["kind"]: v for k, v in samples(metrics, "compactor_driver_memory_bytes").items()}

    before = now()
    assert set(before) == {"malloc_in_use", "malloc_free", "arrow_pool"}
    held = bytearray(64 << 20)  # past glibc's mmap threshold: a block of its own
    buffer = pa.allocate_buffer(32 << 20)
    during = now()
    assert during["malloc_in_use"] - before["malloc_in_use"] >= 64 << 20
    assert during["arrow_pool"] - before["arrow_pool"] >= 32 << 20
    del held, buffer
    after = now()
    assert during["malloc_in_use"] - after["malloc_in_use"] >= 64 << 20, "given back, not kept"
    assert after["arrow_pool"] == before["arrow_pool"]


def test_the_blocks_python_holds_count_the_objects_the_driver_keeps() -> None:
    metrics = ShardMetrics()

    def blocks() -> float:
        return samples(metrics, "compactor_driver_python_blocks")[()]

    before = blocks()
    kept = [object() for _ in range(100_000)]
    during = blocks()
    assert during - before >= 99_000  # give or take the odd block of the interpreter's own
    del kept
    assert during - blocks() >= 99_000, "dropped objects are not counted"
