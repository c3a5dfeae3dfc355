"""Events an operator publishes: new table configs."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from compactor.config.tables import ProjectConfig
from compactor.domain.events import ConfigApplied


def config_events(project: ProjectConfig, tables: Iterable[str], at: datetime) -> list[ConfigApplied]:
    """One ConfigApplied per table: its effective settings (defaults applied) as JSON."""
    events = []
    for table in tables:
        settings = project.for_table(table)
        events.append(ConfigApplied(table, settings.config_version, settings.model_dump_json(), at))
    return events
