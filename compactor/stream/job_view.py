"""What a running job lets its observers read (the metrics, the summary line, the status of a
running job): the catalog through its read-only view, the configs, the control state, the clock
and the counters. Nothing here is for changing the job."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from compactor.catalog.view import CatalogView
from compactor.stream.control import Control
from compactor.stream.key_indexes import IndexFacts
from compactor.stream.stats import HandlerStats
from compactor.stream.table_configs import TableConfigs


@dataclass(frozen=True)
class JobView:
    catalog: CatalogView
    configs: TableConfigs
    control: Control  # read at scrape time; the stream's parts write it
    clock: Callable[[], datetime]
    stats: Callable[[], HandlerStats]  # the counters, read now
    key_indexes: Callable[[], Mapping[str, IndexFacts]] = dict  # upsert tables' key indexes, read now
    kept_commit_bytes: Callable[[], int] = int  # the store's commit cache, read now
