"""Table config: YAML -> validated, frozen objects.

Shape (the contract): a `defaults` block applies to every table; a table under
`tables` replaces any key it gives. Unknown keys and impossible values are
refused with an error naming the table, the key, the value and why.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from compactor.config.describe import problems
from compactor.config.kafka import KafkaConfig
from compactor.config.layout import LayoutConfig, UpsertConfig
from compactor.config.off_peak import OffPeak
from compactor.config.rules import (
    AutoMergeRule,
    BinPackRule,
    MajorRule,
    MinorRule,
    RefreshRule,
    Resources,
    RuleConfig,
    RuleName,
)
from compactor.config.sort import SortConfig, by_column
from compactor.config.sub_partitions import SubPartitionConfig
from compactor.config.units import COLUMN_NAME, ByteSize, ByteSizeOrZero, Duration, Frozen, parse_duration
from compactor.config.vacuum import VacuumConfig
from compactor.domain.segments import TABLE_NAME
from compactor.errors import ConfigError

DEFAULT_CHECKPOINT_EVERY = 10  # Delta's own default delta.checkpointInterval


class ProducerAdviceConfig(Frozen):
    """When the job advises a table's producers to load less often (a `ProducerAdvice` event)."""

    max_small_segments: int = Field(default=1000, ge=1)
    """Advise once more than this many unmerged loads smaller than `min_segment_size` wait."""
    min_segment_size: ByteSize = 128 * 1024 * 1024
    """Loads under this size count as small; also the minimum size the advice recommends."""


class TableFields(Frozen):
    """The keys of a table config, each checked on its own (types, ranges, rule list).

    `defaults` and every entry of `tables` are TableFields: partial documents.
    Checks that relate several keys run on the merged result (`TableSettings`).
    """

    merge_enabled: bool = True
    """false: the table never merges (loads are still recorded). `compactor table disable` is
    the switch for a pause."""
    preserve_latest: int = Field(default=0, ge=0)
    """Leave the N most recently loaded segments alone."""
    allowed_compaction_days: int = Field(default=0, ge=0)
    """Merge only segments loaded within this many days of now; 0 turns the filter off."""
    lookback: timedelta | None = None
    """Merge only segments whose data ended within this long of now (`30d`, `12h`); null or
    `off`: no limit."""
    rules: tuple[RuleConfig, ...] = (AutoMergeRule(rule="auto_merge"),)
    """The rules, run in the order listed, each at most once; a segment is never claimed by two
    plans. `auto_merge` cannot share a table with another rule."""
    sub_partition: SubPartitionConfig | None = None
    """A second partition level under time (Kylin multi-level partitioning)."""
    upsert: UpsertConfig | None = None
    """Makes the table an upsert table: the latest row per primary key is the valid one."""
    config_version: int = Field(default=1, ge=1)
    """The table config's version: the job adopts a published config (`compactor config apply`)
    whose version is newer than the one it holds."""
    layout: LayoutConfig | None = None
    """How the table's segments must be built; the `refresh` rule rewrites those that differ."""
    vacuum: VacuumConfig = VacuumConfig()
    """When the files of replaced segments are deleted (Delta's VACUUM)."""
    promote_files_over: ByteSize | None = Field(default=128 * 1024 * 1024, ge=1)
    """A merge moves input segments made only of files at least this large into its output by
    metadata instead of rewriting them (half the 256 MiB write target); null: always rewrite."""
    certify_merges: bool | None = None
    """This table's content certificates (`operations.certify_merges`), on or off; null: as the
    job's setting says. false is the escape hatch for one table whose certificates refuse sound
    merges (an upsert table holding two keys whose 64-bit hashes collide), leaving the other
    tables checked; `compactor verify` still checks its merges afterwards."""
    max_debt: Duration | None = None
    """The merge debt objective, in hours of ingest (`2h`): status and metrics say met, at risk
    or breached; null: no objective."""
    max_write_amplification: float | None = Field(default=None, gt=0)
    """Budget of bytes rewritten by merges over bytes loaded, over the last 30 days: once spent,
    optional merges (upper layers, level 2, later pools) wait; null: no budget."""
    producer_advice: ProducerAdviceConfig | None = ProducerAdviceConfig()
    """When to advise the table's producers that their loads are too small; null: never."""
    priority: float = Field(default=1.0, gt=0)
    """The table's weight when tables share merge slots or `operations.max_merges_per_batch`."""
    quota: float = Field(default=1.0, gt=0)
    """The table's share of merge time: a free merge slot goes to the table, of any shard of the
    job, whose merge time over the last ten minutes divided by its quota (its occupation) is the
    lowest; 2 lets a table use twice what a table with 1 uses while both have merges waiting."""
    sort: SortConfig | None = None
    """The order every rewrite lays rows out in (`by: [customer_id, country]`, `curve: zorder`);
    null: the time column's order when the table declares one, else the order rows are read in."""
    time_column: str | None = Field(default=None, pattern=COLUMN_NAME)
    """The table's event-time column, for tables without a refresh `layout` (which names its
    own): with no `sort`, merges sort by it, so that time filters skip files within a segment."""
    target_file_size: ByteSize = Field(default=256 * 1024 * 1024, ge=1024)
    """A rewrite cuts its output into files of about this size, along the sort order."""
    purge_deleted_ratio: float | None = Field(default=0.2, gt=0, le=1)
    """A segment whose files hold at least this share of rows other writers deleted (kept in
    deletion vectors) is rewritten without them; null: never purge."""
    checkpoint_every: int = Field(default=DEFAULT_CHECKPOINT_EVERY, ge=1)
    """The job writes a checkpoint of the table's Delta log once the log holds more than this many
    commits since the last one, whoever wrote them, on a maintainer thread of its own: no merge
    waits for one (the job's commits leave Delta's inline checkpoint out). 10 is Delta's own
    default `delta.checkpointInterval`."""
    hold_checkpoint_interval: bool = False
    """Let the job alone decide when the table's log is checkpointed: its maintainer raises the
    table's `delta.checkpointInterval` to 1,000,000 (one metadata commit, off the merge path),
    so that no commit lands on a checkpoint version. Delta rebuilds a table's whole state inside
    any commit that does, to count its files for its statistics, even with the checkpoint left
    to the maintainer: one merge in `delta.checkpointInterval` pays for it otherwise. While the job
    is stopped, no writer checkpoints such a table. Turned off while the job runs, the property is
    given back (unset); turned off across a restart, it is left as it is (unset it with `ALTER
    TABLE ... UNSET TBLPROPERTIES ('delta.checkpointInterval')`)."""

    @field_validator("rules")
    @classmethod
    def _one_of_each(cls, rules: tuple[RuleConfig, ...]) -> tuple[RuleConfig, ...]:
        names = [r.rule for r in rules]
        if len(set(names)) != len(names):
            raise ValueError(f"each rule may be listed once per table, got {names}")
        if RuleName.AUTO_MERGE in names and len(names) > 1:
            # minor, major and bin_pack merge segments that are not adjacent in time; the
            # output spans the gap, and a segment filling it later would overlap it
            raise ValueError(
                f"auto_merge needs disjoint, contiguous segments and cannot share a table with {names}: "
                "the other rules merge across gaps and would create overlapping ranges"
            )
        return rules

    @field_validator("lookback", mode="before")
    @classmethod
    def _lookback(cls, value: Any) -> timedelta | None:
        if value is None or value == "off" or value is False:
            return None
        duration = parse_duration(value)
        if duration <= timedelta(0):
            raise ValueError("lookback must be positive (or `off`)")
        return duration

    @field_validator("max_debt")
    @classmethod
    def _positive_debt(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value <= timedelta(0):
            raise ValueError(f"max_debt {value} is not a positive duration")
        return value

    @property
    def needs_disjoint_ranges(self) -> bool:
        """Time-layer rules cannot reason about overlapping segments."""
        return any(r.rule == RuleName.AUTO_MERGE.value for r in self.rules)

    def spark_pools(self) -> dict[str, Resources]:
        """The Spark FAIR pools this table's merges run in, with their resources."""
        return {
            name: found if isinstance(found, Resources) else Resources(min_share=found)
            for name, found in self._pools()
        }

    def spark_pool(self, rule: str, pool: str | None) -> str | None:
        """The FAIR pool a plan of `rule` (bin packing: of `pool`) runs in; None: Spark's default.
        Asked for every waiting plan, so no pool's resources are built."""
        name = pool if pool is not None else rule
        return name if any(found == name for found, _ in self._pools()) else None

    def _pools(self) -> Iterator[tuple[str, Resources | int]]:
        """Each pool's name with its resources, or with the cores a minor or major rule's pool
        holds (its resources are built only by `spark_pools`)."""
        for rule in self.rules:
            if isinstance(rule, BinPackRule):
                yield from ((p.name, p.resources) for p in rule.pools)
            elif isinstance(rule, MinorRule | MajorRule) and rule.cores_while_compacting:
                yield rule.rule, rule.cores_while_compacting


class TableSettings(TableFields):
    """The effective settings of one table: defaults merged with its keys, then checked as a whole."""

    @model_validator(mode="after")
    def _keys_agree(self) -> TableSettings:
        refresh = [r for r in self.rules if isinstance(r, RefreshRule)]
        if refresh and self.layout is None:
            raise ValueError(
                "the refresh rule needs the table's `layout` (time_column, bucket_time_period, columns)"
            )
        for rule in refresh:
            for metric in rule.aggregations:
                if self.layout is not None and metric not in self.layout.columns:
                    raise ValueError(f"aggregation column {metric!r} is not a layout column")
        if any(r.rule == RuleName.UPSERT_COMPACTION.value for r in self.rules) and self.upsert is None:
            raise ValueError(
                "upsert_compaction needs the table's `upsert` block (primary_key, comparison_column)"
            )
        if self.upsert is not None and any(
            r.rule in {RuleName.MINOR, RuleName.MAJOR, RuleName.BIN_PACK, RuleName.AUTO_MERGE}
            for r in self.rules
        ):
            raise ValueError(
                "an upsert table merges with upsert_compaction, and may refresh its segments one by one "
                "(encoding, compression, sort order); minor, major, bin_pack and auto_merge would merge "
                "without removing superseded rows"
            )
        if self.upsert is not None:
            self._upsert_keeps_its_keys()
        return self

    @model_validator(mode="after")
    def _one_order(self) -> TableSettings:
        """`layout.sorted_column` is the same idea as `sort:`; both may be given only if they agree."""
        legacy = self.layout.sorted_column if self.layout is not None else None
        if self.sort is not None and legacy is not None and self.sort != by_column(legacy):
            raise ValueError(
                f"layout.sorted_column {legacy!r} and sort {self.sort.describe()} disagree: "
                "give the order once, under sort"
            )
        return self

    def certifies(self, job_wide: bool) -> bool:
        """Whether the table's rewrites are certified: its own `certify_merges`, else the job's."""
        return job_wide if self.certify_merges is None else self.certify_merges

    @property
    def layout_order(self) -> SortConfig | None:
        """The order rewrites apply: `sort`, else refresh's sorted column, else the time column."""
        if self.sort is not None:
            return self.sort
        if self.layout is not None and self.layout.sorted_column is not None:
            return by_column(self.layout.sorted_column)
        time_column = self.time_column or (self.layout.time_column if self.layout is not None else None)
        return by_column(time_column) if time_column is not None else None

    def _upsert_keeps_its_keys(self) -> None:
        """As in Pinot's upsert tables, an upsert table's rows keep their primary keys and its
        segments map M:1: its refresh rewrites each segment whole (`rules.refresh`, `whole`),
        never re-bucketed, repartitioned or split."""
        for rule in self.rules:
            if isinstance(rule, RefreshRule) and rule.merge_type == "rollup":
                raise ValueError(
                    "an upsert table cannot roll up (refresh merge_type rollup): rows must keep their primary "
                    "keys intact"
                )
        if self.layout is not None and self.layout.partitioning is not None:
            raise ValueError(
                f"an upsert table cannot be repartitioned (layout.partitioning on {self.layout.partitioning.column!r}): "
                "its segments are merged M:1, never split by value"
            )


class OperationsConfig(Frozen):
    """How the job runs, not what it merges: the failure cool-down, the metrics endpoint, and
    what a second controller does."""

    cool_down: Duration = timedelta(minutes=5)
    """A failed plan, or a table whose work failed, is left alone this long before it is tried
    again (without waiting for an event)."""
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    """Serve `/metrics`, `/healthz` and `/ready` on this port (`compactor run --metrics-port`
    wins); null: no server."""
    standby: bool = False
    """A second `compactor run` on the same warehouse and topic waits for the lease and takes over
    when the holder stops, instead of exiting 4."""
    defer_optional_over_lag: int | None = Field(default=10_000, ge=1)
    """Past this many events behind on the segments topic, optional merges (upper time layers,
    level 2, later pools) wait until the job catches up; null: never."""
    max_merges_per_batch: int | None = Field(default=None, ge=1)
    """At most this many merges start per micro-batch (or tick), shared across the tables with
    merges waiting by deficit round-robin; null: every merge starts as soon as it is planned and
    a slot is free."""
    shards: int = Field(default=1, ge=1, le=1024)
    """The segments topic's partitions grouped into this many shards (shard i: the partitions p
    with p mod shards = i), each a streaming query of its own that one of the jobs sharing the
    warehouse runs; 1: one job runs every table. Changing it needs `compactor run --reshard`."""
    max_concurrent_merges: int = Field(default=4, ge=1)
    """Merges that run at once, each on a driver thread: different tables', and disjoint plans of
    one table; a bin-pack pool (or a rule's `cores_while_compacting`) also has its own limit."""
    merge_write_tasks: int | None = Field(default=None, ge=1)
    """A merge writes its output with at most this many Spark tasks at once, each writing its
    files (of about `target_file_size`) in turn; null: Spark's default parallelism (its cores,
    unless `spark.default.parallelism` is set) less one, at least one, so that a big merge leaves
    a core to the stream's micro-batches and the small merges beside it (Spark does not take a
    core back from a running task)."""
    merge_timeout_floor: Duration = timedelta(minutes=10)
    """A merge is given at least this long before it counts as hung."""
    merge_timeout_per_gib: Duration = timedelta(minutes=10)
    """And this much more per GiB of input: a merge running past floor + its GiB x this (at most
    `merge_timeout`) is cancelled (its Spark jobs), counted, and tried again after its cool-down."""
    merge_timeout: Duration = timedelta(hours=6)
    """The longest any merge may run before it is cancelled, however big."""
    quarantine_after: int | None = Field(default=5, ge=1)
    """A table whose merges fail this many times in a row (each cool-down twice the last, up to
    16 times `cool_down`) is quarantined with its last error: no attempt until its config
    changes or an operator enables it again (`compactor table enable`); null: never."""
    driver_merge_max_bytes: ByteSizeOrZero = 16 << 20
    """A plain merge of at most this many input bytes (written as one file) is read and written by
    the driver with Arrow, with no Spark job, when its inputs allow (no deletion vectors, exact
    statistics, flat columns of primitive types, no column mapping, no curve layout); 0: every
    merge is written by Spark."""
    driver_batch_reads: bool = True
    """The driver reads each micro-batch's events itself, with its Kafka client, over the offsets
    Spark planned for the batch (Spark still records them), instead of a Spark job of executor
    tasks (about 100 ms a batch). false, or a batch whose plan it does not recognise: Spark reads."""
    certify_merges: bool = True
    """Every merge proves, before its commit, that it wrote exactly the rows its inputs held (a
    content certificate, checked and recorded in the commit; docs: Reading compacted tables), and
    is refused if not. false: merges commit unchecked (for comparing costs, or as an escape hatch
    should a certificate refuse good merges; `compactor verify` still checks them afterwards)."""
    off_peak: OffPeak | None = None
    """Optional merges run only inside this daily window (UTC, e.g. `{start: "22:00", end:
    "06:00"}`); required ones run at any time; null: optional merges run at any time."""
    check_other_writers_every: Duration = timedelta(minutes=1)
    """Between batches, every table's log is looked at this often for commits other writers
    made (a DELETE, a load without an event), so that a table with no events of its own is
    still checked, and its deleted rows purged (one file lookup per table)."""

    def merge_time_bound(self, input_bytes: int) -> timedelta:
        """How long a merge of `input_bytes` may run before it counts as hung."""
        grown = self.merge_timeout_floor + self.merge_timeout_per_gib * (input_bytes / (1 << 30))
        return min(grown, self.merge_timeout)

    @field_validator("cool_down", "check_other_writers_every", "merge_timeout_floor", "merge_timeout")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError(f"{value} is not a positive duration")
        return value


class ProjectConfig(Frozen):
    """The whole file: project defaults plus per-table overrides.

    Each table's effective settings are its keys over the defaults, validated
    after merging, so a key may rely on another given at the other level (a
    `defaults.layout` for a table's refresh rule, a table's `upsert` for a
    default upsert_compaction rule). Listed tables are checked when the file
    loads; a table that is not listed gets the defaults, checked when first used.
    """

    defaults: TableFields = TableFields()
    """Table keys that apply to every table that does not give them itself."""
    tables: Mapping[str, TableFields] = Field(default_factory=dict)
    """Table name -> the keys that replace the defaults for that table. Names are letters,
    digits and `_`, not starting with a digit."""
    kafka: KafkaConfig | None = None
    """Security, topics and client settings for every Kafka client."""
    spark: Mapping[str, str] = Field(default_factory=dict)
    """Spark settings (`spark.*` keys) for the job and every Spark-using command, such as an
    object store's endpoint; over the project's defaults and spark-submit's, under `--conf`."""
    operations: OperationsConfig = OperationsConfig()
    """How the job runs."""

    @field_validator("spark", mode="before")
    @classmethod
    def _spark_settings(cls, settings: Any) -> Any:
        if not isinstance(settings, Mapping):
            return settings
        for key in settings:
            if not str(key).startswith("spark."):
                raise ValueError(f"{key!r} is not a Spark setting (they start with `spark.`)")
        as_text = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in settings.items()}
        return MappingProxyType(as_text)

    @field_validator("tables")
    @classmethod
    def _table_names(cls, tables: Mapping[str, TableFields]) -> Mapping[str, TableFields]:
        for name in tables:
            if not TABLE_NAME.match(name):
                raise ValueError(
                    f"table name {name!r} is invalid: use letters, digits or '_', not starting with a digit"
                )
        return MappingProxyType(dict(tables))  # frozen all the way down

    _effective: dict[str, TableSettings] = PrivateAttr(default_factory=dict)

    def spark_pools(self) -> dict[str, Resources]:
        """Every Spark FAIR pool the tables' merges run in (bin-pack pools, CarbonData cores), with
        its resources. A name given different resources in two places is refused: Spark has one
        pool of a name."""
        found: dict[str, tuple[str, Resources]] = {}
        named = [("defaults", self.defaults), *((f"tables.{n}", t) for n, t in self.tables.items())]
        for where, fields in named:
            for name, resources in TableFields.spark_pools(fields).items():
                first = found.setdefault(name, (where, resources))
                if first[1] != resources:
                    raise ConfigError(
                        f"{where}: pool {name!r} has resources {resources.model_dump()}, but {first[0]} "
                        f"gives it {first[1].model_dump()}; a Spark pool has one weight, minShare and "
                        "concurrency: rename one of them"
                    )
        return {name: resources for name, (_, resources) in found.items()}

    def for_table(self, table: str) -> TableSettings:
        """Effective settings: the table's keys over the project defaults (cached).

        Raises ConfigError naming the table when the merged keys do not agree.
        """
        found = self._effective.get(table)
        if found is None:
            merged = {name: getattr(self.defaults, name) for name in self.defaults.model_fields_set}
            override = self.tables.get(table)
            if override is not None:
                merged |= {name: getattr(override, name) for name in override.model_fields_set}
            try:
                found = TableSettings.model_validate(merged)
            except ValidationError as exc:
                if override is not None:
                    raise ConfigError("\n".join(problems(exc, ("tables", table)))) from None
                raise ConfigError(
                    f"table {table!r} is not listed under `tables`, and the defaults alone are not a "
                    f"complete table config: {'; '.join(p.strip() for p in problems(exc))}"
                ) from None
            self._effective[table] = found
        return found
