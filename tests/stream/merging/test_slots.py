"""One account of merge slots for the whole job: shards starting merges on several threads at once
never pass the limit or a pool's cap; a free slot goes to the table that used least of its
share of merge time (its occupation), whichever shard holds it; a freed slot wakes every shard;
and in a drain, quiet tables are served within their share beside a hot one."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.domain.plans import MergePlan, make_plan
from compactor.domain.segments import Segment, TimeRange
from compactor.stream.merging.inflight import InFlight
from compactor.stream.merging.slots import Slots
from compactor.stream.merging.waiting import WaitingPlans
from compactor.stream.merging.workers import Finished, MergeThreads, SharedWorkers

T0 = datetime(2024, 1, 1, tzinfo=UTC)
CAPS = {"narrow": 1, "wide": 2}


def plan(table: str, n: int) -> MergePlan:
    start = T0 + timedelta(days=2 * n)
    inputs = [
        Segment(
            f"{table}-{n}-{k}",
            table,
            TimeRange(start + timedelta(days=k), start + timedelta(days=k + 1)),
            start,
            1,
        )
        for k in range(2)
    ]
    return make_plan(table, "minor", inputs)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(2, 4),
    st.lists(st.sampled_from([None, "narrow", "wide"]), min_size=4, max_size=24),
)
def test_shards_starting_merges_on_many_threads_never_pass_the_limit_or_a_pools_cap(
    limit: int, shards: int, pools: list[str | None]
) -> None:
    slots = Slots(limit, CAPS.get)
    pool_threads = MergeThreads(8)
    inflights = [
        InFlight(SharedWorkers(pool_threads), slots, lambda table, pid: None, shard=i) for i in range(shards)
    ]
    running: dict[str | None, int] = {}
    peak = {"all": 0, "narrow": 0, "wide": 0}
    lock = threading.Lock()

    def merge(pool: str | None, merge_plan: MergePlan) -> Finished:
        with lock:
            running[pool] = running.get(pool, 0) + 1
            total = sum(running.values())
            peak["all"] = max(peak["all"], total)
            if pool is not None:
                peak[pool] = max(peak[pool], running[pool])
        time.sleep(0.002)
        with lock:
            running[pool] -= 1
        return Finished(merge_plan)

    def shard_thread(index: int) -> None:
        inflight = inflights[index]
        todo = [(plan(f"t{index}", n), pool) for n, pool in enumerate(pools)]
        deadline = time.monotonic() + 20
        while todo and time.monotonic() < deadline:
            merge_plan, pool = todo[0]
            if inflight.start(merge_plan, pool, lambda p=pool, m=merge_plan: merge(p, m)):  # type: ignore[misc]
                todo.pop(0)
            else:
                inflight.wait(0.01)
            inflight.take_finished()
        while inflight.running() and time.monotonic() < deadline:
            inflight.wait(0.01)
            inflight.take_finished()

    threads = [threading.Thread(target=shard_thread, args=(i,)) for i in range(shards)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    pool_threads.shutdown(wait=True)
    assert peak["all"] <= limit and peak["narrow"] <= 1 and peak["wide"] <= 2, peak
    assert slots.free() == limit and all(i.running() == 0 for i in inflights), "every merge ran and ended"


def test_a_free_slot_goes_to_the_table_that_used_least_of_its_share_in_any_shard() -> None:
    clock = Clock()
    quotas = {"hot": 1.0, "quiet": 1.0, "big": 4.0}
    slots = Slots(1, CAPS.get, quota=quotas.__getitem__, clock=clock, window=600)
    woken: list[str] = []
    slots.on_free(lambda: woken.append("shard 0"))
    slots.on_free(lambda: woken.append("shard 1"))
    assert slots.try_take("h1", "hot", None, shard=0) is None
    clock.now = 100.0
    slots.give("h1")
    assert woken == ["shard 0", "shard 1"], "a freed slot wakes every shard"
    assert slots.occupation("hot") == 100.0 and slots.occupation("quiet") == 0.0
    slots.demand(1, {"quiet": None})
    why = slots.try_take("h2", "hot", None, shard=0)
    assert why == "table quiet of shard 1 has used less of its share"
    assert slots.try_take("q1", "quiet", None, shard=1) is None
    assert slots.free() == 0
    clock.now = 160.0  # quiet's running merge counts as it goes
    assert slots.occupation("quiet") == 60.0
    slots.give("q1")
    slots.demand(1, {})
    assert slots.try_take("h2", "hot", None, shard=0) is None, "nobody else waits: hot runs"
    clock.now = 900.0
    slots.give("h2")
    assert slots.occupation("hot") == 600.0, "only the window's part of a merge counts"
    clock.now = 1600.0  # the window moved on: old merge time is forgotten
    assert slots.occupation("hot") == 0.0 and slots.occupation("quiet") == 0.0
    # a quota of 4 counts a quarter of the time
    assert slots.try_take("b1", "big", None, shard=2) is None
    clock.now = 1640.0
    assert slots.occupation("big") == 10.0


def test_in_a_drain_the_quiet_tables_are_served_within_their_share_beside_a_hot_one() -> None:
    """Shard 0 holds a hot table with 20 merges waiting, shard 1 three quiet tables with two each;
    two slots, every merge takes 10 s. Each quiet table's merges all start before the hot table
    has had more than its share of the slots, instead of after its backlog."""
    clock = Clock()
    slots = Slots(2, CAPS.get, clock=clock)
    waiting = [WaitingPlans(lambda table: 1.0), WaitingPlans(lambda table: 1.0)]
    waiting[0].offer("hot", [plan("hot", n) for n in range(20)])
    for table in ("q1", "q2", "q3"):
        waiting[1].offer(table, [plan(table, n) for n in range(2)])
    ends: list[tuple[float, str]] = []  # (when it ends, plan id)
    started: list[tuple[float, str]] = []  # (when, table)

    def round_of(shard: int) -> None:
        queue = waiting[shard]
        slots.demand(shard, {p.table: None for p in queue.ready(lambda p: True)})
        for each in queue.next_round(lambda p: True, slots.free, None, slots.occupation):
            if slots.try_take(each.plan_id, each.table, None, shard) is not None:
                queue.put_back(each)
                break
            started.append((clock.now, each.table))
            ends.append((clock.now + 10, each.plan_id))
        slots.demand(shard, {p.table: None for p in queue.ready(lambda p: True)})

    while any(w.tables() for w in waiting) or ends:
        for shard in (0, 1):  # the hot shard always asks first
            round_of(shard)
        ends.sort()
        if ends:
            clock.now, done = ends.pop(0)
            slots.give(done)

    order = [table for _, table in started]
    last_quiet = max(i for i, table in enumerate(order) if table != "hot")
    hot_before = order[:last_quiet].count("hot")
    assert len(started) == 26
    assert hot_before <= 6, (
        f"the hot table took {hot_before} slots before the quiet ones were served: {order}"
    )
