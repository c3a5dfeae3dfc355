"""Event-driven streaming compactor for Delta Lake segments.

The public API is importable from here (`from compactor import SparkLoader`); everything
else is internal. Names are resolved on first use, so `import compactor` stays cheap: no
Spark, no Kafka client, until a name that needs one is used.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from compactor.client.arrow_loader import ArrowLoader
    from compactor.client.connection import Connection
    from compactor.client.loader import load_segment, load_sub_partition, refresh_sub_partition, sample_rows
    from compactor.client.results import ResultsFollower
    from compactor.client.spark_loader import SparkLoader
    from compactor.client.streaming_sink import StreamingSink
    from compactor.codec.events import Codec
    from compactor.domain.events import (
        CompactionRequested,
        ConfigApplied,
        MergeStatus,
        ProducerAdvice,
        SegmentAction,
        SegmentCompleted,
    )
    from compactor.domain.segments import Segment, TimeRange, new_segment_id
    from compactor.errors import CompactorError

# each public name and the module that defines it
_HOMES = {
    "SparkLoader": "compactor.client.spark_loader",
    "ArrowLoader": "compactor.client.arrow_loader",
    "StreamingSink": "compactor.client.streaming_sink",
    "ResultsFollower": "compactor.client.results",
    "Connection": "compactor.client.connection",
    "Codec": "compactor.codec.events",
    "SegmentCompleted": "compactor.domain.events",
    "SegmentAction": "compactor.domain.events",
    "CompactionRequested": "compactor.domain.events",
    "ConfigApplied": "compactor.domain.events",
    "ProducerAdvice": "compactor.domain.events",
    "MergeStatus": "compactor.domain.events",
    "Segment": "compactor.domain.segments",
    "TimeRange": "compactor.domain.segments",
    "new_segment_id": "compactor.domain.segments",
    "CompactorError": "compactor.errors",
    "load_segment": "compactor.client.loader",
    "load_sub_partition": "compactor.client.loader",
    "refresh_sub_partition": "compactor.client.loader",
    "sample_rows": "compactor.client.loader",
}

__all__ = [  # the names of _HOMES, spelled out for type checkers and linters
    "ArrowLoader",
    "Codec",
    "CompactionRequested",
    "CompactorError",
    "ConfigApplied",
    "Connection",
    "MergeStatus",
    "ProducerAdvice",
    "ResultsFollower",
    "Segment",
    "SegmentAction",
    "SegmentCompleted",
    "SparkLoader",
    "StreamingSink",
    "TimeRange",
    "__version__",
    "load_segment",
    "load_sub_partition",
    "new_segment_id",
    "refresh_sub_partition",
    "sample_rows",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'compactor' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value  # resolved once
    return value
