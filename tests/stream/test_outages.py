"""An outage is not a broken table: failures many tables share pause attempts instead of
quarantining them; a table that fails alone is still quarantined, its planning failures too."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from compactor.domain.events import MergeStatus
from compactor.domain.plans import make_plan
from compactor.stream.outages import Outages, error_kind
from compactor.stream.triggers import Trigger
from tests.helpers.harness import Clock, Harness
from tests.stream.test_concurrency import three_loads

MINOR = {"rule": "minor", "level_thresholds": [3, 0]}
T0 = datetime(2024, 3, 1, tzinfo=UTC)


def config(**operations: Any) -> dict[str, Any]:
    return {"defaults": {"rules": [MINOR]}, "operations": {"cool_down": "60s", **operations}}


def refused() -> OSError:
    return OSError("py4j: java.net.ConnectException: Connection refused (s3a://warehouse)")


def loads_the_store_refuses(harness: Harness, tables: list[str]) -> list[Any]:
    """Three loads of each table, whose merge then fails as an unreachable store makes it fail."""
    loads = []
    for table in tables:
        loads += three_loads(harness, table)
        plan = make_plan(table, "minor", [harness.day(i, sid=f"{table}{i}", table=table) for i in range(3)])
        harness.store.failures[plan.plan_id] = refused()
    return loads


def test_the_kind_of_an_error_names_the_jvm_exception_inside_it() -> None:
    assert error_kind(refused()) == "OSError/java.net.ConnectException"
    assert error_kind(ValueError("corrupt footer")) == "ValueError"


def test_many_tables_failing_alike_is_an_outage_and_their_counted_failures_are_forgiven() -> None:
    clock = Clock(T0)
    outages = Outages(lambda: clock.now, pause=timedelta(minutes=1))
    outages.succeeded("quiet")  # attempted in the window: 4 tables, 3 must fail alike
    assert outages.failed("a", refused()) is None, "one table: its own failure"
    assert outages.failed("a", refused()) is None
    assert outages.failed("b", ValueError("other")) is None, "another kind counts apart"
    assert outages.failed("b", refused()) is None
    assert outages.failed("c", refused()) == {"a": 2, "b": 1}, "declared: what it had counted, forgiven"
    assert outages.current is not None and outages.paused()
    assert outages.failed("d", refused()) == {}, "in the outage: counted against nobody"
    clock.now += timedelta(minutes=2)
    assert not outages.paused(), "the pause ended: a probe round"
    outages.succeeded("a")
    assert outages.current is None


def test_failures_of_one_table_never_make_an_outage() -> None:
    clock = Clock(T0)
    outages = Outages(lambda: clock.now, pause=timedelta(minutes=1))
    for _ in range(10):
        assert outages.failed("bad", refused()) is None
        clock.now += timedelta(seconds=30)
    assert outages.current is None


def test_a_shared_outage_quarantines_no_table_and_they_merge_once_it_ends(harness: Harness) -> None:
    handler = harness.handler(config(quarantine_after=2))
    tables = ["a", "b", "c", "d"]
    loads = loads_the_store_refuses(harness, tables)
    handler.process(loads)
    for _ in range(6):  # an hour-long outage in cool-downs and pauses
        harness.clock.now += timedelta(minutes=10)
        handler.process([])
        handler.tick()
    assert [t for t in tables if handler.catalog.quarantined(t)] == [], "no table blamed for an outage"
    assert handler.runner.failures.outages is not None and handler.runner.failures.outages.declared >= 1
    assert handler.stats.paused_attempts > 0
    harness.store.failures.clear()  # the object store is back
    for _ in range(3):
        harness.clock.now += timedelta(minutes=10)
        handler.process([])
        handler.tick()
    merged = {r["table"] for r in harness.results() if r["status"] is MergeStatus.SUCCEEDED}
    assert merged == set(tables)


def test_a_table_whose_planning_keeps_failing_backs_off_and_is_quarantined(harness: Harness) -> None:
    handler = harness.handler(config(quarantine_after=3))
    plans = handler.planner.plans

    def broken(trigger: Trigger) -> Any:
        if trigger.table == "bad":
            raise RuntimeError("the upsert key read failed")
        return plans(trigger)

    handler.planner.plans = broken  # type: ignore[method-assign]
    handler.process(three_loads(harness, "bad"))
    waits = []
    for _ in range(2):
        cooling = dict(handler.planner.cool_down.cooling("bad"))
        waits.append(cooling["table:bad"] - harness.clock.now)
        harness.clock.now = cooling["table:bad"] + timedelta(seconds=1)
        handler.process([])
        handler.tick()
    assert waits == [timedelta(seconds=60), timedelta(seconds=120)], "backing off, as merges do"
    assert handler.catalog.quarantined("bad") is not None
    assert "the upsert key read failed" in (handler.catalog.quarantined("bad") or "")


def test_the_handler_says_what_outage_pauses_it(harness: Harness) -> None:
    handler = harness.handler(config(quarantine_after=2))
    assert handler.outage_line() is None
    outages = handler.runner.failures.outages
    assert outages is not None
    for table in "abc":
        outages.failed(table, refused())
    line = handler.outage_line()
    assert line is not None and "3 table(s) failed with OSError/java.net.ConnectException" in line


def test_tables_refused_alike_by_the_job_are_broken_tables_not_an_outage() -> None:
    """Several liquid-clustered tables fail with the same UnsupportedTableFeature: no service will
    come back to fix that; each is quarantined on its own."""
    from compactor.errors import UnsupportedTableFeature

    clock = Clock(T0)
    outages = Outages(lambda: clock.now, pause=timedelta(minutes=1))
    for table in "abcd":
        refused = UnsupportedTableFeature(f"table at /wh/{table}: clustering (liquid clustering)")
        assert outages.failed(table, refused) is None
    assert outages.current is None


def test_cool_downs_that_ended_are_forgotten() -> None:
    """One entry per failed plan, kept forever, would grow with the years."""
    from compactor.stream.cool_down import CoolDown

    clock = Clock(T0)
    cool_down = CoolDown(lambda: clock.now, timedelta(minutes=5))
    for i in range(1000):
        cool_down.start(f"plan-{i}", f"t{i % 7}", "boom")
        clock.now += timedelta(minutes=1)
    assert len(cool_down._until) <= 6, "only the cool-downs still running are kept"
    assert cool_down.active("plan-999") and not cool_down.active("plan-0")


def test_an_outage_is_told_among_the_tables_that_tried_since_it_began() -> None:
    """Fifty tables merged in the last minutes; then the store went away. The share that reveals
    an outage is of the tables that tried since the first failure, not of all fifty."""
    clock = Clock(T0)
    outages = Outages(lambda: clock.now, pause=timedelta(minutes=1))
    for n in range(50):
        outages.succeeded(f"t{n:02}")
    clock.now += timedelta(seconds=5)
    assert outages.failed("t01", refused()) is None
    assert outages.failed("t02", refused()) is None
    assert outages.failed("t03", refused()) == {"t01": 1, "t02": 1}, "3 of the 3 that tried since"
    assert outages.current is not None


def test_a_table_failing_alike_with_others_and_no_success_since_is_not_quarantined_yet(
    harness: Harness,
) -> None:
    """With short cool-downs one table reached its quarantine streak before a third had tried
    (issue 49's years run: t03, t08 and t15 quarantined in a 40 s store outage)."""
    handler = harness.handler(config(quarantine_after=2, cool_down="1s"))
    failures = handler.runner.failures
    failures.failed("t08", "p8", refused(), "minor", "plan p8")  # another table, the same error
    failures.failed("t03", "p3", refused(), "minor", "plan p3")
    failures.failed("t03", "p3", refused(), "minor", "plan p3")
    assert handler.catalog.quarantined("t03") is None, "held: an outage is likely"
    assert failures.cool_down.streak("t03") == 2, "its streak still grows"

    assert failures.outages is not None
    failures.outages.succeeded("t20")  # the store is back: others merge again
    failures.failed("t03", "p3", refused(), "minor", "plan p3")
    assert handler.catalog.quarantined("t03") is not None, "failing while others succeed: its own"


def test_a_table_failing_while_others_succeed_is_quarantined_whatever_others_failed_with() -> None:
    clock = Clock(T0)
    outages = Outages(lambda: clock.now, pause=timedelta(minutes=1))
    outages.failed("other", refused())
    outages.succeeded("healthy")
    outages.failed("broken", refused())
    assert not outages.suspected("broken", refused()), "a success came after the other's failure"
    assert not outages.suspected("lonely", ValueError("its own")), "nobody else failed so"


def test_an_outage_that_restarts_the_shard_is_declared_once_and_said_over_once(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """The store's outage fails the shard's query too, and the shard starts again in the same
    process: the new start goes on pausing and probing the same outage, instead of declaring it
    a second time and leaving the first never said to be over (the years benchmark: 3 outages
    declared 4 times, 2 said over)."""
    outages = Outages(lambda: harness.clock.now, pause=timedelta(minutes=1))
    first = harness.handler(config(quarantine_after=2), outages=outages)
    tables = ["a", "b", "c", "d"]
    loads = loads_the_store_refuses(harness, tables)
    with caplog.at_level("INFO", logger="compactor.stream.outages"):
        first.process(loads)
        assert outages.declared == 1 and first.failures.paused()

        again = harness.handler(config(quarantine_after=2), outages=outages)  # the shard restarted
        assert again.failures.paused() and again.outage_line() == first.outage_line()
        for _ in range(3):  # still out
            harness.clock.now += timedelta(minutes=2)
            again.process([])
            again.tick()
        assert outages.declared == 1, "one outage, declared once"
        harness.store.failures.clear()  # the store is back
        for _ in range(2):
            harness.clock.now += timedelta(minutes=2)
            again.process([])
            again.tick()
    said = [r.getMessage() for r in caplog.records if r.name == "compactor.stream.outages"]
    assert [m.split(";")[0].split(": ")[-1] for m in said if "over" in m] == ["table a succeeded"]
    assert sum("no table is quarantined for it" in m for m in said) == 1
    assert [t for t in tables if again.catalog.quarantined(t)] == []
    merged = {r["table"] for r in harness.results() if r["status"] is MergeStatus.SUCCEEDED}
    assert merged == set(tables)
