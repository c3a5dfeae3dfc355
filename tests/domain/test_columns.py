"""The columnar view of a table's segments: kept exactly in step with the segments, and the
planners answer the same through it as through a list, whatever the rows' order."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactor.config.tables import TableSettings
from compactor.domain import newest_loads
from compactor.domain.columns import SegmentColumns, TableSegments, group_key, order_by
from compactor.domain.segments import Origin, Segment, SegmentState, TimeRange
from compactor.rules.engine import evaluate
from compactor.rules.size_threshold import walk
from tests.rules.test_planner_properties import scenarios

BASE = datetime(2024, 3, 1, tzinfo=UTC)
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def segment(i: int, hours: int = 1, **kw: object) -> Segment:
    start = BASE + timedelta(hours=i)
    fields: dict[str, object] = {"loaded_at": start + timedelta(hours=hours), **kw}
    return Segment(f"s{i}", "t", TimeRange(start, start + timedelta(hours=hours)), **fields)  # type: ignore[arg-type]


def expected_columns(segments: list[Segment]) -> dict[str, list[object]]:
    """The columns computed one segment at a time, the obvious way."""
    return {
        "start": [s.start.timestamp() for s in segments],
        "end": [s.end.timestamp() for s in segments],
        "loaded": [s.loaded_at.timestamp() for s in segments],
        "size": [s.bytes for s in segments],
        "records": [s.records for s in segments],
        "level": [s.level for s in segments],
        "settled": [s.state is SegmentState.ONLINE and not s.sub_partition_states for s in segments],
        "as_loaded": [s.origin is Origin.LOAD for s in segments],
    }


def assert_in_step(view: SegmentColumns) -> None:
    rows = list(view)
    assert len(view) == len(rows)
    for name, values in expected_columns(rows).items():
        assert view.column(name).tolist() == values, name
    # equal group codes exactly for equal (schema version, sub-partitions, indexes)
    codes = view.group.tolist()
    for a, sa in zip(codes, rows, strict=True):
        for b, sb in zip(codes, rows, strict=True):
            assert (a == b) == (group_key(sa) == group_key(sb))


OPS = st.lists(
    st.tuples(
        st.sampled_from(("set", "del")),
        st.integers(0, 30),
        st.integers(1, 4),
        st.sampled_from((1, 2)),
        st.sampled_from((frozenset(), frozenset({"eu"}))),
        st.sampled_from(tuple(SegmentState)),
    ),
    max_size=80,
)


@FAST
@given(OPS)
def test_table_segments_behave_as_a_dict_and_keep_their_columns_in_step(ops: list[tuple]) -> None:
    table, model = TableSegments(), {}
    for op, i, hours, version, subs, state in ops:
        if op == "set":
            s = segment(i, hours, bytes=i * 10 + hours, records=i, level=hours % 3, schema_version=version,
                        sub_partitions=subs, state=state, origin=Origin.MERGE if hours == 4 else Origin.LOAD)  # fmt: skip
            table[s.id], model[s.id] = s, s
        elif f"s{i}" in model:
            del table[f"s{i}"], model[f"s{i}"]
        assert dict(table) == model and list(table) == list(model)  # insertion order, as a dict
    view = table.columns()
    assert sorted(s.id for s in view) == sorted(model)
    assert_in_step(view)


@FAST
@given(
    st.lists(st.tuples(st.sampled_from(("set", "del")), st.integers(0, 40), st.integers(0, 6)), max_size=120),
    st.lists(st.integers(0, 5), min_size=1, max_size=30),
    st.sampled_from((0, 1, 64)),
)
def test_the_newest_loads_are_kept_exactly_through_additions_new_descriptions_and_removals(
    ops: list[tuple[str, int, int]], asks: list[int], slack: int
) -> None:
    """`newest(n)` is the n most recently loaded (ties by id) after any changes; load times
    repeat, so ties at the cut are settled by id. With little slack the kept list is shorter
    than the table, and additions, new descriptions and removals each change it."""
    kept_slack, newest_loads.SLACK = newest_loads.SLACK, slack
    try:
        check_newest(ops, asks)
    finally:
        newest_loads.SLACK = kept_slack


def check_newest(ops: list[tuple[str, int, int]], asks: list[int]) -> None:
    table, model = TableSegments([segment(i, loaded_at=BASE + timedelta(hours=i % 3)) for i in range(3)]), {}
    model = {s.id: s for s in table.values()}
    asked = iter(asks * 10)
    for op, i, when in ops:
        if op == "set":
            s = segment(i, loaded_at=BASE + timedelta(hours=when))
            table[s.id], model[s.id] = s, s
        elif op == "del" and f"s{i}" in model:
            del table[f"s{i}"], model[f"s{i}"]
        n = next(asked, 2)
        expected = [s.id for s in sorted(model.values(), key=lambda s: (s.loaded_at, s.id))][-n:] if n else []
        assert table.newest(n) == expected
        assert table.columns().newest(n) == expected
        assert SegmentColumns.of(list(model.values())).newest(n) == expected  # a plain list: sorted


def test_a_view_narrows_and_looks_values_up_by_id() -> None:
    segments = [segment(i, bytes=100 * i) for i in range(6)]
    view = SegmentColumns.of(segments)
    narrowed = view.take(np.array([4, 1, 3]))
    assert [s.id for s in narrowed] == ["s4", "s1", "s3"]
    assert narrowed.size.tolist() == [400, 100, 300]
    assert [s.id for s in narrowed.without({"s1", "nope"})] == ["s4", "s3"]
    assert [s.id for s in view.take(view.size >= 300)] == ["s3", "s4", "s5"]
    counts = {"s3": 7, "s4": 2, "gone": 9}  # an id the table no longer holds is ignored
    assert narrowed.values_for(counts).tolist() == [2, 0, 7]
    assert narrowed.values_for({"s1": 5}).tolist() == [0, 5, 0]
    assert narrowed[1:].__len__() == 2 and narrowed[-1].id == "s3"


@FAST
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), min_size=1, max_size=40), st.randoms())
def test_order_by_sorts_by_both_keys_then_id(keys: list[tuple[int, int]], rnd: object) -> None:
    segments = [segment(i) for i in range(len(keys))]
    rnd.shuffle(segments)  # type: ignore[attr-defined]
    view = SegmentColumns.of(segments)
    primary = np.array([float(keys[int(s.id[1:])][0]) for s in segments])
    secondary = np.array([float(keys[int(s.id[1:])][1]) for s in segments])
    expected = sorted(range(len(segments)), key=lambda i: (primary[i], secondary[i], segments[i].id))
    assert order_by(primary, view, secondary).tolist() == expected
    expected = sorted(range(len(segments)), key=lambda i: (primary[i], segments[i].id))
    assert order_by(primary, view).tolist() == expected


def walk_one_by_one(sizes: list[int], threshold: int) -> list[bool]:
    """The size-threshold walk as CarbonData's major compaction states it."""
    taken, total = [], 0
    for size in sizes:
        fits = total + size < threshold
        taken.append(fits)
        total += size if fits else 0
    return taken


@FAST
@given(st.lists(st.integers(0, 120), max_size=300), st.integers(0, 400))
def test_the_vectorised_size_walk_is_the_seeds_walk(sizes: list[int], threshold: int) -> None:
    assert walk(np.array(sizes, np.int64), threshold).tolist() == walk_one_by_one(sizes, threshold)


@FAST
@given(scenarios(), st.randoms(), st.integers(0, 12))
def test_planners_answer_the_same_through_the_catalogs_columns(
    scenario: tuple[list[Segment], TableSettings, datetime], rnd: object, churn: int
) -> None:
    """Rows in any order (additions, then removals that move the last row into the hole)
    and the view of a live, changing table give the plans a list gives."""
    segments, table_settings, now = scenario
    table = TableSegments()
    extra = [replace(s, id=f"x{k}-{s.id}") for k, s in enumerate(segments[:churn])]
    arriving = segments + extra
    rnd.shuffle(arriving)  # type: ignore[attr-defined]
    for s in arriving:
        table[s.id] = s
    for s in extra:
        del table[s.id]
    expected = evaluate("t", segments, table_settings, now)
    through_columns = evaluate("t", table.columns(), table_settings, now)
    assert through_columns.plans == expected.plans
    assert set(through_columns.decisions) == set(expected.decisions)
    quiet = evaluate("t", table.columns(), table_settings, now, explain=False)
    assert quiet.plans == expected.plans


@FAST
@given(OPS, st.lists(st.integers(0, 30), max_size=30))
def test_noted_counts_follow_their_segments_through_moves_and_new_descriptions(
    ops: list[tuple], noted_ids: list[int]
) -> None:
    """A count noted for a segment stays with it when rows move (a removal fills its hole
    with the last row) and when the segment is described anew; a new segment starts at 0."""
    table, expected = TableSegments(), {}
    for step, (op, i, hours, *_) in enumerate(ops):
        sid = f"s{i}"
        if op == "set":
            if sid not in table:
                expected[sid] = 0
            table[sid] = segment(i, hours)
        elif sid in table:
            del table[sid]
            del expected[sid]
        if step % 2 == 0:  # between notes, segments come, go and are described anew
            counts = {f"s{n}": n + step for n in noted_ids if f"s{n}" in table}
            table.note_invalid(counts)
            expected |= counts
    view = table.columns()
    assert dict(zip((s.id for s in view), view.invalid.tolist(), strict=True)) == expected
    table.note_invalid({}, whole=True)
    assert not table.columns().invalid.any() and table.noted
