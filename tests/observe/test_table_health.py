"""Each table's status word and health score (pure), and the least healthy first."""

from __future__ import annotations

from datetime import timedelta

import pytest

from compactor.observe.status.table_health import TableFacts, assess, least_healthy

MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("facts", "word", "state"),
    [
        (TableFacts(total_bytes=100), "merged", "merged"),
        (TableFacts(awaiting_segments=3, awaiting_bytes=12 * MIB, total_bytes=40 * MIB), "awaiting 3 segments (12 MiB)", "awaiting"),
        (TableFacts(running=1, awaiting_segments=3), "merging", "merging"),
        (TableFacts(running=2), "merging (2 merges)", "merging"),
        (TableFacts(waiting="pool small runs 1 of its 1 merges", awaiting_segments=2), "waiting: pool small runs 1 of its 1 merges", "waiting"),
        (TableFacts(quarantine="ValueError: corrupt footer", running=1), "quarantined: ValueError: corrupt footer", "quarantined"),
        (TableFacts(merging_enabled=False, quarantine="x"), "disabled", "disabled"),
    ],
)  # fmt: skip
def test_one_word_per_table_in_order_of_what_matters_most(facts: TableFacts, word: str, state: str) -> None:
    found = assess(facts)
    assert (found.word, found.state) == (word, state)


def test_the_score_weighs_layout_deleted_rows_and_the_age_of_the_debt() -> None:
    assert assess(TableFacts(total_bytes=100)).score == 100
    half_waiting = TableFacts(
        awaiting_segments=2, awaiting_bytes=50, total_bytes=100, oldest_wait=timedelta(hours=12)
    )
    found = assess(half_waiting)
    assert found.parts == {"layout": 0.5, "deleted": 1.0, "age": 0.5}
    assert found.score == round(100 * (0.4 * 0.5 + 0.3 * 1.0 + 0.3 * 0.5))
    deleted = TableFacts(total_bytes=100, hidden_rows=10, stored_rows=100, purge_ratio=0.2)
    assert assess(deleted).parts["deleted"] == 0.5
    overdue = TableFacts(
        awaiting_segments=1,
        awaiting_bytes=1,
        total_bytes=100,
        oldest_wait=timedelta(hours=3),
        objective=timedelta(hours=1),
    )
    assert assess(overdue).parts["age"] == 0.0
    assert assess(TableFacts(total_bytes=100, quarantine="boom")).score == 0


def test_the_least_healthy_come_first() -> None:
    healths = {
        "ok": assess(TableFacts(total_bytes=1)),
        "bad": assess(TableFacts(total_bytes=1, quarantine="x")),
        "meh": assess(TableFacts(awaiting_segments=1, awaiting_bytes=1, total_bytes=2)),
    }
    assert [t for t, _ in least_healthy(healths, 2)] == ["bad", "meh"]
