"""Table and project config: YAML -> validated, frozen objects.

Shape (the contract): a `defaults` block applies to every table; a table under
`tables` replaces any key it gives. Unknown keys and impossible values are
refused with an error naming the table, the key, the value and why.

This package re-exports its public names for users of the library; modules of
the compactor import from the submodules.
"""

from compactor.config.kafka import KafkaConfig
from compactor.config.layout import ColumnConfig, LayoutConfig, PartitioningConfig, UpsertConfig
from compactor.config.loading import load_config, load_config_file, settings_from_json
from compactor.config.rules import (
    DEFAULT_POOLS,
    RULE_NAMES,
    AutoMergeRule,
    BinPackRule,
    MajorRule,
    MinorRule,
    PoolConfig,
    RefreshRule,
    RuleConfig,
    RuleName,
    UpsertCompactionRule,
)
from compactor.config.sub_partitions import SubPartitionConfig, parse_sub_partition_value
from compactor.config.tables import ProjectConfig, TableFields, TableSettings
from compactor.config.units import parse_duration, parse_size

__all__ = [
    "DEFAULT_POOLS",
    "RULE_NAMES",
    "AutoMergeRule",
    "BinPackRule",
    "ColumnConfig",
    "KafkaConfig",
    "LayoutConfig",
    "MajorRule",
    "MinorRule",
    "PartitioningConfig",
    "PoolConfig",
    "ProjectConfig",
    "RefreshRule",
    "RuleConfig",
    "RuleName",
    "SubPartitionConfig",
    "TableFields",
    "TableSettings",
    "UpsertCompactionRule",
    "UpsertConfig",
    "load_config",
    "load_config_file",
    "parse_duration",
    "parse_size",
    "parse_sub_partition_value",
    "settings_from_json",
]
