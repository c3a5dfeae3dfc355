"""The timeline's layout (pure) and the picture it draws (matplotlib, no Spark)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from PIL import Image

from compactor.catalog.changes import CommitRecord
from compactor.domain.segments import SegmentState
from compactor.errors import ConfigError
from compactor.observe.pictures.timeline import Timeline, layout
from compactor.observe.pictures.timeline_plot import save
from tests.helpers.segments import day, seg

NOW = day("2024-02-01")


def a_table() -> tuple[Timeline, list[str]]:
    loads = [seg(f"d{n}", f"2024-01-1{n}", bytes=100 * (n + 1)) for n in range(3)]
    loading = seg("d3", "2024-01-13", bytes=50, state=SegmentState.LOADING)
    split = seg("s0", "2024-01-10", bytes=80, sub_partitions=frozenset({"eu", "us"}))
    old = seg("w1", "2024-01-01", "2024-01-07", bytes=5000, level=1)
    new = seg("w2", "2024-01-08", "2024-01-09", bytes=4000, level=1)
    history = [
        CommitRecord("t", 3, (old,), ("a", "b"), op="merge", committed_at=NOW - timedelta(hours=30)),
        CommitRecord("t", 9, (new,), ("c", "e"), op="merge", committed_at=NOW - timedelta(hours=2)),
        CommitRecord("t", 10, (loading,), ()),  # a load, however new, is not a merge
    ]
    drawn = layout("t", [*loads, loading, split, old, new], history, NOW, timedelta(hours=6))
    return drawn, [b.segment.id for b in drawn.boxes]


def test_rows_are_levels_and_sub_partition_sets_and_only_recent_merges_are_flagged() -> None:
    drawn, ids = a_table()
    assert drawn.rows == ("L0", "L0 {eu,us}", "L1")
    assert ids == ["w1", "w2", "d0", "s0", "d1", "d2", "d3"], "by start of event time"
    assert {b.segment.id: b.row for b in drawn.boxes} == {
        "w1": 2, "w2": 2, "d0": 0, "s0": 1, "d1": 0, "d2": 0, "d3": 0
    }  # fmt: skip
    assert [b.segment.id for b in drawn.boxes if b.recent] == ["w2"]
    assert drawn.describe() == "table t: 7 segments, 9730 bytes, 3 lanes; 1 written by merges in the last 6 h"


def test_the_picture_is_drawn_with_its_segment_count_in_the_metadata(tmp_path: Path) -> None:
    drawn, _ = a_table()
    out = tmp_path / "t.png"
    save(drawn, out)
    with Image.open(out) as image:
        assert image.text["Description"] == drawn.describe()
        assert image.text["Title"] == "compactor timeline: t"
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50, "boxes, a colour bar and labels, not a blank image"

    svg = tmp_path / "t.svg"
    save(drawn, svg)
    assert "7 segments" in svg.read_text() and svg.read_text().count("<path") > 7


def test_an_empty_table_draws_and_an_unknown_format_is_refused(tmp_path: Path) -> None:
    empty = layout("t", [], [], NOW, timedelta(hours=1))
    save(empty, tmp_path / "e.png")
    assert Image.open(tmp_path / "e.png").text["Description"].startswith("table t: 0 segments")
    with pytest.raises(ConfigError, match=r"--out .*t\.jpg: write a \.png or \.svg file, not '\.jpg'"):
        save(empty, tmp_path / "t.jpg")
