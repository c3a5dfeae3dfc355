"""Config contract: YAML -> validated, frozen settings; defaults + table overrides; clear errors."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from compactor.config.loading import load_config, load_config_file
from compactor.config.rules import DEFAULT_POOLS, AutoMergeRule, BinPackRule, MajorRule, MinorRule
from compactor.config.tables import TableSettings
from compactor.config.units import parse_duration, parse_size
from compactor.domain.calendar import Level
from compactor.errors import ConfigError

CONTRACT_YAML = """\
defaults:
  merge_enabled: true
  rules:
    - rule: auto_merge
      levels: [week, month]
tables:
  sales:
    preserve_latest: 0
    allowed_compaction_days: 0
    lookback: 30d
    rules:
      - rule: minor
        level_thresholds: [4, 3]
      - rule: major
        size_threshold: 1024MB
        trigger: manual
      - rule: bin_pack
        strategy: best_fit
"""

MB = 1024 * 1024
GB = 1024 * MB


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tables.yaml"
    path.write_text(text)
    return path


def config_error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(data)
    return str(info.value)


# --- the contract document -------------------------------------------------------------


def test_contract_yaml_loads(tmp_path: Path) -> None:
    config = load_config_file(write(tmp_path, CONTRACT_YAML))

    assert config.defaults.merge_enabled is True
    assert config.defaults.rules == (AutoMergeRule(rule="auto_merge", levels=(Level.WEEK, Level.MONTH)),)

    sales = config.for_table("sales")
    assert sales.merge_enabled is True
    assert sales.preserve_latest == 0
    assert sales.allowed_compaction_days == 0
    assert sales.lookback == timedelta(days=30)
    minor, major, bin_pack = sales.rules
    assert isinstance(minor, MinorRule)
    assert minor.level_thresholds == (4, 3)
    assert minor.trigger == "on_load"
    assert isinstance(major, MajorRule)
    assert major.size_threshold == 1024 * MB == GB
    assert major.trigger == "manual"
    assert isinstance(bin_pack, BinPackRule)
    assert bin_pack.strategy == "best_fit"
    assert bin_pack.pools == DEFAULT_POOLS
    assert not sales.needs_disjoint_ranges


def test_table_without_overrides_gets_the_defaults(tmp_path: Path) -> None:
    config = load_config_file(write(tmp_path, CONTRACT_YAML))
    other = config.for_table("orders")
    assert other.model_dump() == config.defaults.model_dump()
    assert other.lookback is None
    assert other.needs_disjoint_ranges


def test_empty_document_means_all_defaults(tmp_path: Path) -> None:
    config = load_config_file(write(tmp_path, ""))
    assert config.for_table("anything") == TableSettings()
    assert TableSettings().rules == (AutoMergeRule(rule="auto_merge"),)
    assert load_config(None).for_table("x") == TableSettings()


# --- sizes and durations ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100", 100),
        (100, 100),
        ("100B", 100),
        ("1KB", 1024),
        ("512KiB", 512 * 1024),
        ("1024MB", 1024 * MB),
        ("1024mb", 1024 * MB),
        ("3MiB", 3 * MB),
        ("1GB", GB),
        ("2GiB", 2 * GB),
        ("1.5GB", 3 * GB // 2),
        (" 7 MB ", 7 * MB),
    ],
)
def test_sizes_parse_with_binary_units(text: object, expected: int) -> None:
    assert parse_size(text) == expected


def test_size_in_the_document_uses_mb_as_1024_squared() -> None:
    config = load_config({"defaults": {"rules": [{"rule": "major", "size_threshold": "1024MB"}]}})
    rule = config.defaults.rules[0]
    assert isinstance(rule, MajorRule)
    assert rule.size_threshold == 1 << 30
    assert MajorRule(rule="major").size_threshold == 1 << 30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("12h", timedelta(hours=12)),
        ("30d", timedelta(days=30)),
        (45, timedelta(seconds=45)),
        (timedelta(hours=2), timedelta(hours=2)),
    ],
)
def test_durations_parse(text: object, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["30x", "1.5h", "d", "-1d", "30 days", ""])
def test_bad_durations_are_refused_by_the_parser(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["10XB", "MB", "-5MB", "1,5GB", "ten"])
def test_bad_sizes_are_refused_by_the_parser(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_pool_sizes_and_durations_parse_in_the_document() -> None:
    config = load_config(
        {
            "defaults": {
                "rules": [
                    {
                        "rule": "bin_pack",
                        "pools": [
                            {"name": "hot", "max_age": "2h", "max_size": "256MiB", "max_width": "30m"},
                            {
                                "name": "cold",
                                "min_age": "2h",
                                "max_age": "7d",
                                "max_size": "8GB",
                                "max_width": 86400,
                            },
                        ],
                    }
                ]
            }
        }
    )
    rule = config.defaults.rules[0]
    assert isinstance(rule, BinPackRule)
    assert rule.strategy == "first_fit"
    hot, cold = rule.pools
    assert (hot.name, hot.min_age, hot.max_age, hot.max_size, hot.max_width) == (
        "hot",
        timedelta(0),
        timedelta(hours=2),
        256 * MB,
        timedelta(minutes=30),
    )
    assert (cold.min_age, cold.max_age, cold.max_size, cold.max_width) == (
        timedelta(hours=2),
        timedelta(days=7),
        8 * GB,
        timedelta(days=1),
    )


# --- defaults and overrides -------------------------------------------------------------


def test_table_keys_replace_only_the_keys_given() -> None:
    config = load_config(
        {
            "defaults": {
                "preserve_latest": 2,
                "allowed_compaction_days": 7,
                "lookback": "10d",
                "rules": [{"rule": "minor", "level_thresholds": [5, 2]}],
            },
            "tables": {
                "sales": {"lookback": "30d"},
                "orders": {"rules": [{"rule": "major"}]},
                "events": {"merge_enabled": False, "preserve_latest": 0},
            },
        }
    )
    sales = config.for_table("sales")
    assert sales.lookback == timedelta(days=30)
    assert sales.preserve_latest == 2
    assert sales.allowed_compaction_days == 7
    assert sales.rules == (MinorRule(rule="minor", level_thresholds=(5, 2)),)

    orders = config.for_table("orders")
    assert orders.rules == (MajorRule(rule="major"),)  # the list is replaced, not merged
    assert orders.lookback == timedelta(days=10)
    assert orders.preserve_latest == 2

    events = config.for_table("events")
    assert events.merge_enabled is False
    assert events.preserve_latest == 0  # an explicit value equal to the model default still overrides
    assert events.allowed_compaction_days == 7

    assert config.for_table("unknown").model_dump() == config.defaults.model_dump()


def test_lookback_off_in_a_table_overrides_a_default_lookback(tmp_path: Path) -> None:
    text = "defaults:\n  lookback: 10d\ntables:\n  sales:\n    lookback: off\n"
    config = load_config_file(write(tmp_path, text))
    assert config.defaults.lookback == timedelta(days=10)
    assert config.for_table("sales").lookback is None


def test_for_table_is_stable() -> None:
    config = load_config({"tables": {"sales": {"preserve_latest": 3}}})
    assert config.for_table("sales") is config.for_table("sales")


# --- refusals ---------------------------------------------------------------------------


def assert_names(message: str, *parts: str) -> None:
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"


@pytest.mark.parametrize(
    ("override", "key", "value"),
    [
        ({"bogus": 1}, "bogus", "1"),
        ({"preserve_latest": -1}, "preserve_latest", "-1"),
        ({"allowed_compaction_days": -2}, "allowed_compaction_days", "-2"),
        ({"lookback": "30x"}, "lookback", "30x"),
        ({"lookback": "-5d"}, "lookback", "-5d"),
        ({"lookback": "0s"}, "lookback", "0s"),
        ({"rules": [{"rule": "minor", "level_thresholds": [4, 101]}]}, "level_thresholds", "101"),
        ({"rules": [{"rule": "minor", "level_thresholds": [-1, 3]}]}, "level_thresholds", "-1"),
        ({"rules": [{"rule": "minor", "level_thresholds": [1, 3]}]}, "level_thresholds", "[1, 3]"),
        ({"rules": [{"rule": "minor", "level_thresholds": [4, 3, 2]}]}, "level_thresholds", "[4, 3, 2]"),
        ({"rules": [{"rule": "minor", "extra": 1}]}, "extra", "1"),
        ({"rules": [{"rule": "major", "size_threshold": "10XB"}]}, "size_threshold", "10XB"),
        ({"rules": [{"rule": "major", "size_threshold": -5}]}, "size_threshold", "-5"),
        ({"rules": [{"rule": "major", "size_threshold": "0MB"}]}, "size_threshold", "0MB"),
        ({"rules": [{"rule": "major", "trigger": "nightly"}]}, "trigger", "nightly"),
        ({"rules": [{"rule": "auto_merge", "levels": ["fortnight"]}]}, "levels", "fortnight"),
        ({"rules": [{"rule": "auto_merge", "levels": []}]}, "levels", "[]"),
        ({"rules": [{"rule": "auto_merge", "levels": ["day", "day"]}]}, "levels", "day"),
        ({"rules": [{"rule": "bin_pack", "strategy": "worst_fit"}]}, "strategy", "worst_fit"),
        ({"rules": [{"rule": "bin_pack", "pools": []}]}, "pools", "[]"),
        ({"rules": [{"rule": "nope"}]}, "rules", "nope"),
        ({"rules": [{"rule": "major"}, {"rule": "major"}]}, "rules", "major"),
        (
            {
                "rules": [
                    {"rule": "minor"},
                    {"rule": "auto_merge"},
                    {"rule": "minor", "level_thresholds": [2, 2]},
                ]
            },
            "rules",
            "minor",
        ),
    ],
)
def test_table_errors_name_table_key_and_value(override: dict[str, Any], key: str, value: str) -> None:
    message = config_error({"tables": {"sales": override}})
    assert_names(message, "'sales'", key, value)


@pytest.mark.parametrize(
    ("pool", "key", "value"),
    [
        ({"name": "p", "max_age": "1d", "max_size": "1GB", "max_width": "-1h"}, "max_width", "-1h"),
        ({"name": "p", "max_age": "1d", "max_size": "1GB", "max_width": -3600}, "max_width", "-3600"),
        ({"name": "p", "max_age": "1d", "max_size": "1XB", "max_width": "1h"}, "max_size", "1XB"),
        (
            {"name": "p", "min_age": "2d", "max_age": "1d", "max_size": "1GB", "max_width": "1h"},
            "max_age",
            "1d",
        ),
        ({"name": "bad name!", "max_age": "1d", "max_size": "1GB", "max_width": "1h"}, "name", "bad name!"),
        ({"name": "p", "max_age": "1d", "max_size": "1GB"}, "max_width", "p"),
        ({"name": "p", "max_age": "1d", "max_size": "1GB", "max_width": "1h", "colour": 1}, "colour", "1"),
    ],
)
def test_pool_errors_name_table_key_and_value(pool: dict[str, Any], key: str, value: str) -> None:
    message = config_error({"tables": {"sales": {"rules": [{"rule": "bin_pack", "pools": [pool]}]}}})
    assert_names(message, "'sales'", "pools", key, value)


def test_duplicate_pool_names_are_refused() -> None:
    pool = {"name": "p", "max_age": "1d", "max_size": "1GB", "max_width": "1h"}
    message = config_error({"tables": {"sales": {"rules": [{"rule": "bin_pack", "pools": [pool, pool]}]}}})
    assert_names(message, "'sales'", "pools", "unique")


@pytest.mark.parametrize("name", ["1sales", "sales-eu", "../etc", "", "a" * 129, "sa les"])
def test_invalid_table_names_are_refused(name: str) -> None:
    message = config_error({"tables": {name: {"preserve_latest": 1}}})
    assert_names(message, "tables", repr(name), "invalid")


def test_defaults_errors_name_the_key_and_value() -> None:
    message = config_error({"defaults": {"allowed_compaction_days": -2}})
    assert_names(message, "defaults.allowed_compaction_days", "-2")
    message = config_error({"defaults": {"rules": [{"rule": "minor", "level_thresholds": [4, 200]}]}})
    assert_names(message, "defaults.rules[0].level_thresholds", "200")


def test_unknown_top_level_key_is_refused() -> None:
    message = config_error({"defaults": {}, "tabels": {"sales": {}}})
    assert_names(message, "tabels", "unknown key")


def test_every_problem_is_listed() -> None:
    message = config_error(
        {"tables": {"sales": {"preserve_latest": -1}, "orders": {"lookback": "soon"}}},
    )
    assert_names(message, "'sales'", "preserve_latest", "-1", "'orders'", "lookback", "soon")


def test_file_errors_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config_file(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config_file(write(tmp_path, "tables: [unclosed\n"))
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config_file(write(tmp_path, "- a\n- b\n"))
    bad = write(tmp_path, "tables:\n  sales:\n    lookback: 30x\n")
    with pytest.raises(ConfigError) as info:
        load_config_file(bad)
    assert_names(str(info.value), str(bad), "'sales'", "lookback", "30x")


def test_zero_lookback_is_refused_like_zero_seconds() -> None:
    message = config_error({"tables": {"sales": {"lookback": 0}}})
    assert_names(message, "'sales'", "lookback", "0")


# --- frozen -----------------------------------------------------------------------------


def test_config_objects_are_frozen(tmp_path: Path) -> None:
    config = load_config_file(write(tmp_path, CONTRACT_YAML))
    sales = config.for_table("sales")
    with pytest.raises(ValidationError):
        config.defaults = TableSettings()  # type: ignore[misc]
    with pytest.raises(ValidationError):
        sales.preserve_latest = 5  # type: ignore[misc]
    with pytest.raises(ValidationError):
        sales.rules[0].level_thresholds = (2, 2)  # type: ignore[union-attr]
    with pytest.raises(ValidationError):
        config.defaults.rules[0].trigger = "manual"  # type: ignore[misc]
    pool = DEFAULT_POOLS[0]
    with pytest.raises(ValidationError):
        pool.max_size = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        sales.rules[0] = MajorRule(rule="major")  # type: ignore[index]
    assert config.for_table("sales").preserve_latest == 0


def test_tables_mapping_is_read_only() -> None:
    config = load_config({"tables": {"sales": {"preserve_latest": 1}}})
    with pytest.raises(TypeError):
        config.tables["orders"] = config.tables["sales"]  # type: ignore[index]
    with pytest.raises(TypeError):
        del config.tables["sales"]  # type: ignore[attr-defined]
    assert config.for_table("orders").model_dump() == config.defaults.model_dump()
    assert config.for_table("sales").preserve_latest == 1


LAYOUT = {"time_column": "t", "bucket_time_period": "1d", "columns": {"t": {"type": "timestamp"}}}
UPSERT = {"primary_key": ["id"], "comparison_column": "version"}


def test_a_table_rule_may_rely_on_a_key_of_the_defaults() -> None:
    """Overrides are merged with the defaults first, then checked as a whole."""
    config = load_config(
        {"defaults": {"layout": LAYOUT}, "tables": {"events": {"rules": [{"rule": "refresh"}]}}}
    )
    events = config.for_table("events")
    assert events.layout is not None and events.layout.time_column == "t"
    assert [r.rule for r in events.rules] == ["refresh"]


def test_a_default_rule_may_rely_on_a_key_of_the_table() -> None:
    config = load_config(
        {"defaults": {"rules": [{"rule": "upsert_compaction"}]}, "tables": {"profiles": {"upsert": UPSERT}}}
    )
    assert config.for_table("profiles").upsert is not None
    with pytest.raises(
        ConfigError,
        match=r"table .other. is not listed under .tables., and the defaults alone.*upsert_compaction needs",
    ):
        config.for_table("other")  # the defaults alone are not a complete table


def test_checks_on_the_merged_result_name_the_table() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(
            {"defaults": {"rules": [{"rule": "refresh"}]}, "tables": {"events": {"preserve_latest": 2}}}
        )
    assert "table 'events'" in str(err.value) and "`layout`" in str(err.value)


def test_spark_settings_in_the_config_are_text_and_must_be_spark_settings() -> None:
    config = load_config(
        {"spark": {"spark.hadoop.fs.s3a.path.style.access": True, "spark.sql.shuffle.partitions": 8}}
    )
    assert dict(config.spark) == {
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.sql.shuffle.partitions": "8",
    }
    with pytest.raises(ConfigError, match=r"key spark: .*'fs.s3a.endpoint' is not a Spark setting"):
        load_config({"spark": {"fs.s3a.endpoint": "http://127.0.0.1:9000"}})


def test_a_minor_threshold_of_one_is_refused_with_the_reason() -> None:
    message = config_error({"tables": {"sales": {"rules": [{"rule": "minor", "level_thresholds": [1, 3]}]}}})
    assert_names(
        message, "'sales'", "level_thresholds", "threshold of 1 is refused", "without merging anything"
    )


@pytest.mark.parametrize(
    ("how", "reason"),
    [("count", "would count them again"), ("avg", "'avg' is not one of sum, min, max, distinct_count_hll")],
)
def test_rollup_functions_outside_the_supported_ones_are_refused_by_name(how: str, reason: str) -> None:
    rule = {"rule": "refresh", "merge_type": "rollup", "aggregations": {"amount": how}}
    message = config_error({"tables": {"sales": {"rules": [rule]}}})
    assert_names(message, "'sales'", "aggregations", "amount", reason)


def test_rollup_accepts_a_distinct_count_sketch() -> None:
    rule = {
        "rule": "refresh",
        "merge_type": "rollup",
        "aggregations": {"users": "distinct_count_hll", "n": "sum"},
    }
    columns = {"t": {"type": "timestamp"}, "users": {"type": "binary"}, "n": {"type": "bigint"}}
    layout = {**LAYOUT, "columns": columns}
    config = load_config({"tables": {"sales": {"layout": layout, "rules": [rule]}}})
    refresh = config.for_table("sales").rules[0]
    assert dict(refresh.aggregations) == {"users": "distinct_count_hll", "n": "sum"}  # type: ignore[union-attr]


def test_operations_block_cool_down_and_metrics_port() -> None:
    from datetime import timedelta

    from compactor.config.loading import load_config
    from compactor.errors import ConfigError

    assert load_config({}).operations.cool_down == timedelta(minutes=5)
    ops = load_config({"operations": {"cool_down": "90s", "metrics_port": 9108}}).operations
    assert ops.cool_down == timedelta(seconds=90) and ops.metrics_port == 9108
    with pytest.raises(ConfigError, match="cool_down"):
        load_config({"operations": {"cool_down": "0s"}})
    with pytest.raises(ConfigError, match="metrics_port"):
        load_config({"operations": {"metrics_port": 70000}})


def test_vacuum_retention_under_deltas_safety_check_needs_an_explicit_override() -> None:
    from datetime import timedelta

    from compactor.config.loading import load_config
    from compactor.errors import ConfigError

    assert load_config({}).for_table("t").vacuum.retention == timedelta(days=7)
    with pytest.raises(
        ConfigError, match=r"retention 1 day, 0:00:00 is shorter than Delta's safety check \(7 days\)"
    ):
        load_config({"tables": {"t": {"vacuum": {"retention": "1d"}}}})
    short = load_config({"tables": {"t": {"vacuum": {"retention": "1d", "allow_short_retention": True}}}})
    assert short.for_table("t").vacuum.retain_hours == 24
    with pytest.raises(ConfigError, match="interval"):
        load_config({"defaults": {"vacuum": {"interval": "0s"}}})


def test_files_are_promoted_over_half_the_write_target_unless_switched_off() -> None:
    config = load_config(
        {"tables": {"off": {"promote_files_over": None}, "big": {"promote_files_over": "1GiB"}}}
    )
    assert config.for_table("t").promote_files_over == 128 * 1024 * 1024
    assert config.for_table("off").promote_files_over is None
    assert config.for_table("big").promote_files_over == 1 << 30
    with pytest.raises(ConfigError, match="promote_files_over"):
        load_config({"defaults": {"promote_files_over": 0}})


def test_a_table_s_own_certify_merges_beats_the_job_s_and_null_follows_it() -> None:
    from compactor.delta.rewrite.merge_settings import MergeSettings

    config = load_config({"tables": {"off": {"certify_merges": False}, "on": {"certify_merges": True}}})
    follows = config.for_table("t")
    assert follows.certify_merges is None
    certified = {
        (table, job_wide): MergeSettings.of(config.for_table(table), certify=job_wide).certify
        for table in ("t", "off", "on")
        for job_wide in (True, False)
    }
    assert certified == {
        ("t", True): True, ("t", False): False,
        ("off", True): False, ("off", False): False,
        ("on", True): True, ("on", False): True,
    }  # fmt: skip
    with pytest.raises(ConfigError, match="certify_merges"):
        load_config({"tables": {"t": {"certify_merges": "sometimes"}}})


def test_seed_004s_quartz_schedule_is_accepted_beside_standard_cron() -> None:
    """Pinot writes schedules in Quartz's form (seconds first, `?`): `0 */30 * * * ?`."""
    from datetime import UTC, datetime

    from croniter import croniter

    from compactor.config.rules import cron_expression

    config = load_config({"defaults": {"rules": [{"rule": "minor", "schedule": "0 */30 * * * ?"}]}})
    (rule,) = config.for_table("t").rules
    assert rule.schedule == "0 */30 * * * ?"
    fires = croniter(cron_expression(rule.schedule), datetime(2026, 1, 1, 0, 10, tzinfo=UTC))
    assert [fires.get_next(datetime).minute for _ in range(3)] == [30, 0, 30]
    assert cron_expression("0 15 10 ? * 6") == "15 10 * * 5 0", "Quartz's 6 (Friday) is cron's 5"
    assert cron_expression("0 2 * * *") == "0 2 * * *"
    with pytest.raises(ConfigError, match="Quartz's seconds-first form"):
        load_config({"defaults": {"rules": [{"rule": "minor", "schedule": "0 61 * * * ?"}]}})


def test_carbondata_rules_run_in_a_pool_with_two_cores_by_default() -> None:
    """Seed 002: `carbon.number.of.cores.while.compacting` defaults to 2."""
    from compactor.spark.session import _fair_pools_file

    settings = load_config({"defaults": {"rules": [{"rule": "minor"}, {"rule": "major"}]}}).for_table("t")
    assert settings.spark_pool("minor", None) == "minor" and settings.spark_pool("major", None) == "major"
    assert {n: r.min_share for n, r in settings.spark_pools().items()} == {"minor": 2, "major": 2}
    xml = _fair_pools_file(settings.spark_pools(), None).read_text()
    assert (
        '<pool name="minor"><schedulingMode>FAIR</schedulingMode><weight>1</weight><minShare>2</minShare>'
        in xml
    )
    off = load_config({"defaults": {"rules": [{"rule": "minor", "cores_while_compacting": None}]}})
    assert off.for_table("t").spark_pool("minor", None) is None


def test_the_jobs_own_pools_are_declared_and_no_table_pool_may_take_their_names() -> None:
    """`compactor run` declares Spark's default pool (FAIR inside, twice the weight) and the
    maintainer's pools, so that a checkpoint never queues in front of the merges."""
    from compactor.config.rules import JOB_POOLS
    from compactor.spark.session import _fair_pools_file

    pools = load_config({"defaults": {"rules": [{"rule": "minor"}]}}).spark_pools() | JOB_POOLS
    xml = _fair_pools_file(pools, None).read_text()
    for name, weight in [("default", 2), ("upkeep", 1), ("vacuum", 1), ("minor", 1)]:
        assert f'<pool name="{name}"><schedulingMode>FAIR</schedulingMode><weight>{weight}</weight>' in xml
    with pytest.raises(ConfigError, match="pool name 'upkeep' is the job's own Spark pool"):
        load_config(
            {
                "defaults": {
                    "rules": [
                        {
                            "rule": "bin_pack",
                            "pools": [
                                {"name": "upkeep", "max_age": "1d", "max_size": "1GB", "max_width": "1h"}
                            ],
                        }
                    ]
                }
            }
        )
