"""A table's sort order: `sort:` with project defaults, refresh's `layout.sorted_column` as the
same setting, the time column as the fallback, and clear errors."""

from __future__ import annotations

from typing import Any

import pytest

from compactor.config.loading import load_config
from compactor.config.sort import SortConfig
from compactor.errors import ConfigError

LAYOUT: dict[str, Any] = {
    "time_column": "ts",
    "bucket_time_period": "1d",
    "columns": {
        "ts": {"type": "timestamp"},
        "customer_id": {"type": "bigint"},
        "country": {"type": "string"},
    },
}


def order(table: dict[str, Any], defaults: dict[str, Any] | None = None) -> SortConfig | None:
    return load_config({"defaults": defaults or {}, "tables": {"t": table}}).for_table("t").layout_order


def test_a_sort_applies_as_given_and_project_defaults_reach_every_table() -> None:
    zorder = {"by": ["customer_id", "country"], "curve": "zorder"}
    assert order({"sort": zorder}) == SortConfig(by=("customer_id", "country"), curve="zorder")
    assert order({}, defaults={"sort": {"by": ["customer_id"]}}) == SortConfig(by=("customer_id",))
    assert order({"sort": zorder}, defaults={"sort": {"by": ["x"]}}).curve == "zorder"  # type: ignore[union-attr]
    assert SortConfig(by=("a", "b"), curve="hilbert").describe() == "hilbert(a,b)"


def test_without_a_sort_the_sorted_column_then_the_time_column_orders_rewrites() -> None:
    assert order({"layout": {**LAYOUT, "sorted_column": "customer_id"}}) == SortConfig(by=("customer_id",))
    assert order({"layout": LAYOUT}) == SortConfig(by=("ts",))
    assert order({"time_column": "event_time"}) == SortConfig(by=("event_time",))
    assert order({}) is None, "no order declared: rows stay as read"


def test_a_sort_and_a_sorted_column_that_agree_load_and_one_that_differs_is_refused() -> None:
    same = {"layout": {**LAYOUT, "sorted_column": "customer_id"}, "sort": {"by": ["customer_id"]}}
    assert order(same) == SortConfig(by=("customer_id",))
    with pytest.raises(ConfigError) as info:
        order({"layout": {**LAYOUT, "sorted_column": "customer_id"}, "sort": {"by": ["country"]}})
    assert "table 't', layout.sorted_column 'customer_id' and sort linear(country) disagree" in str(
        info.value
    )


@pytest.mark.parametrize(
    ("sort", "message"),
    [
        ({"by": ["customer_id"], "curve": "zorder"}, "sort.curve zorder orders 2 to 4 columns, got 1"),
        (
            {"by": ["a", "b", "c", "d", "e"], "curve": "hilbert"},
            "sort.curve hilbert orders 2 to 4 columns, got 5",
        ),
        ({"by": ["a", "a"]}, "sort.by names a column twice: ['a', 'a']"),
        ({"by": ["bad column"]}, "sort.by: 'bad column' is not a column name"),
        ({"by": []}, "sort.by"),
        ({"by": ["a"], "curve": "spiral"}, "sort.curve"),
    ],
)
def test_a_bad_sort_is_refused_naming_the_key_and_value(sort: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        order({"sort": sort})
    assert message in str(info.value)
    assert "table 't'" in str(info.value) or "tables.t.sort" in str(info.value)
