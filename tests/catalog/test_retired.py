"""What is kept of retired segments: a fingerprint per segment and a filter of ids without false negatives."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from compactor.catalog.retired import Newest, RetiredFilter, RetiredSegment, fingerprint
from tests.helpers.segments import seg

A = seg("a", "2024-01-01", records=5)


def test_the_fingerprint_tells_a_re_delivery_from_a_reused_id() -> None:
    kept = RetiredSegment.of(A, "plan-1")
    assert kept.same_event(A)
    assert kept.same_event(replace(A, bytes=999)), (
        "sizes in bytes vary with encoding; they are not the identity"
    )
    assert not kept.same_event(replace(A, records=6))
    assert not kept.same_event(seg("a", "2024-01-02", records=5))
    assert fingerprint(A) != fingerprint(replace(A, sub_partitions=frozenset({"eu"})))


@given(st.sets(st.text(min_size=1, max_size=12), min_size=1, max_size=3000))
def test_the_filter_never_forgets_an_id_and_survives_a_round_trip(ids: set[str]) -> None:
    kept = RetiredFilter()
    for sid in ids:
        kept.add(sid)
    restored = RetiredFilter.from_bytes(kept.to_bytes())
    assert all(restored.might_contain(sid) for sid in ids)
    assert len(restored) == len(ids)


def test_the_filter_grows_and_keeps_false_positives_rare() -> None:
    kept = RetiredFilter()
    for i in range(20_000):  # many times the first layer's capacity
        kept.add(f"seg-{i}")
    false = sum(kept.might_contain(f"other-{i}") for i in range(10_000))
    assert false < 500, f"{false} false positives in 10,000"
    assert RetiredFilter.from_bytes(None).might_contain("x") is False


def test_newest_keeps_at_most_its_limit_over_all_tables_and_drops_the_oldest_first() -> None:
    kept: Newest[int] = Newest(3)
    for n, (table, key) in enumerate([("t", "a"), ("u", "b"), ("t", "c"), ("t", "a")]):
        kept.set(table, key, n)
    assert len(kept) == 3 and kept.get("t", "a") == 3 and kept.keys("t") == {"a", "c"}
    kept.set("u", "d", 4)  # "a" was set again, but keeps its place: the oldest leaves
    assert kept.get("t", "a") is None and kept.keys("t") == {"c"} and list(kept.values("u")) == [1, 4]
    kept.set("v", "e", 5)
    assert not kept.has("u", "b") and len(kept) == 3 and kept.keys("v") == {"e"}
