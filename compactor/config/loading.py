"""Loading a config: YAML or JSON -> validated, frozen objects; errors name table, key and value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from compactor.config.describe import describe
from compactor.config.tables import ProjectConfig, TableSettings
from compactor.errors import ConfigError


def load_config(data: dict[str, Any] | None, source: str = "<dict>") -> ProjectConfig:
    """Validate a parsed document; raise ConfigError with every problem listed."""
    try:
        config = ProjectConfig.model_validate(data or {})
    except ValidationError as exc:
        raise ConfigError(describe(exc, source)) from None
    found = []
    for table in config.tables:  # each listed table, merged with the defaults, must agree with itself
        try:
            config.for_table(table)
        except ConfigError as exc:
            found.append(str(exc))
    try:
        config.spark_pools()
    except ConfigError as exc:
        found.append(str(exc))
    if found:
        raise ConfigError("\n".join([f"invalid config {source}:", *found]))
    return config


def load_config_file(path: Path | str) -> ProjectConfig:
    """Read and validate a YAML config file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {path} is not valid YAML: {exc}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"config {path}: the top level must be a mapping, got {type(data).__name__}")
    return load_config(data, str(path))


def settings_from_json(text: str, table: str) -> TableSettings:
    """A table's settings as `compactor config apply` publishes them; ConfigError if invalid."""
    try:
        return TableSettings.model_validate_json(text)
    except ValidationError as exc:
        raise ConfigError(describe(exc, f"published for table {table!r}")) from None
