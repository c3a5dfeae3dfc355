"""One endpoint for the shards a job runs: each sample labelled with its shard, a shard handed
on leaves the endpoint."""

from __future__ import annotations

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
