"""Delta's file actions made in the JVM in bulk: a Scala `Seq` of `AddFile`s or `RemoveFile`s from
their JSON, in two py4j calls whatever their number.

A small merge of 16 segments named its inputs and outputs to Delta's transaction one action at a
time: each parsed (`Action.fromJson`), each removal made (`removeWithTimestamp`), each added to
a list, each proxy released again, some 130 round trips of about 80 us of CPU each (both
processes), a twentieth of a small merge. Here Delta's own JSON mapper reads a JSON array of the
actions into a Java array in one call, and Scala wraps it as a `Seq` in another.

A removal is made as `AddFile.removeWithTimestamp` makes it (Delta 4.4): the add's path,
partition values, size, tags, deletion vector, row-tracking fields and statistics, with the
removal's timestamp, `dataChange`, and `extendedFileMetadata`; a test compares the two.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from compactor.delta.files import jvm_class

ACTION_CLASSES = {
    "add": "org.apache.spark.sql.delta.actions.AddFile",
    "remove": "org.apache.spark.sql.delta.actions.RemoveFile",
}
# the add's fields a removal keeps, as `AddFile.removeWithTimestamp` passes them on
KEPT_BY_REMOVAL = (
    "partitionValues",
    "size",
    "tags",
    "deletionVector",
    "baseRowId",
    "defaultRowCommitVersion",
    "stats",
    "backReference",
)
_READERS: weakref.WeakKeyDictionary[Any, dict[str, tuple[Any, Any]]] = weakref.WeakKeyDictionary()


def action_seq(jvm: Any, kind: str, actions: Sequence[Mapping[str, Any]]) -> Any:
    """`actions` (each the object the log writes under `kind`, "add" or "remove") as a Scala
    `Seq` of Delta's action objects."""
    mapper, array_class = _reader(jvm, kind)
    array = mapper.readValue(json.dumps(list(actions), separators=(",", ":")), array_class)
    return jvm_class(jvm, "scala.collection.immutable.ArraySeq").unsafeWrapArray(array)


def removal(add: Mapping[str, Any], timestamp_ms: int, data_change: bool) -> dict[str, Any]:
    """The `remove` of the file `add` names, at `timestamp_ms`."""
    removed: dict[str, Any] = {
        "path": add["path"],
        "deletionTimestamp": timestamp_ms,
        "dataChange": data_change,
        "extendedFileMetadata": True,
    }
    removed |= {key: add[key] for key in KEPT_BY_REMOVAL if add.get(key) is not None}
    return removed


def _reader(jvm: Any, kind: str) -> tuple[Any, Any]:
    """Delta's JSON mapper and the Java class of an array of `kind`'s actions (`AddFile[]`),
    looked up once per JVM."""
    known = _READERS.setdefault(jvm, {})
    found = known.get(kind)
    if found is None:
        element = jvm_class(jvm, "py4j.reflection.ReflectionUtil").classForName(ACTION_CLASSES[kind])
        found = known[kind] = (
            jvm_class(jvm, "org.apache.spark.sql.delta.util.JsonUtils").mapper(),
            jvm_class(jvm, "java.lang.reflect.Array").newInstance(element, 0).getClass(),
        )
    return found
