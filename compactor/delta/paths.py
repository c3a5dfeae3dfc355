"""Where tables live and the columns every table has: the leaf of the Delta layer.

A warehouse is a directory or a URI (`/data/wh`, `file:///data/wh`,
`s3a://bucket/wh`, `abfss://...`, `gs://...`); every table lives at
`<warehouse>/<table>`, partitioned by `segment_id`, so a merge touches only its
inputs' partitions and concurrent appends of new segments never conflict with it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from urllib.parse import unquote

from compactor.domain.segments import validate_table_name
from compactor.errors import CompactorError

SEGMENT_COLUMN = "segment_id"
TARGET_FILE_BYTES = 256 * 1024 * 1024  # a merge writes files of about this size
RESERVED = "_compactor"  # the compactor's own state under the warehouse: not a table name
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def warehouse_uri(warehouse: Path | str) -> str:
    """The warehouse as a URI Hadoop opens: URIs as given, local paths made absolute."""
    text = str(warehouse)
    if _SCHEME.match(text):
        return text.rstrip("/")
    return str(Path(text).expanduser().resolve())


def delta_table_sql(uri: str) -> str:
    """The table at `uri` as Spark SQL names it: delta.`<uri>`, a backtick in the path doubled."""
    return "delta.`" + uri.replace("`", "``") + "`"


def sql_string(value: str) -> str:
    """`value` as a Spark SQL string literal, its backslashes and quotes escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def is_local(uri: str) -> bool:
    return not _SCHEME.match(uri) or uri.startswith("file:")


def free_bytes(uri: str) -> int | None:
    """Free space on the file system holding `uri`, when it is a local one (None on object stores)."""
    if not is_local(uri):
        return None
    path = Path(uri.removeprefix("file://").removeprefix("file:"))
    while not path.exists() and path != path.parent:  # a table not written yet: its warehouse's disk
        path = path.parent
    return shutil.disk_usage(path).free


def data_file_uri(table: str, path: str) -> str:
    """Where an `add` action's `path` is, as Hadoop takes a path literally: the path is a URI,
    relative to the table unless it has a scheme or starts at the root, with its characters
    escaped (Delta decodes it the same way)."""
    decoded = unquote(path)
    return decoded if _SCHEME.match(path) or path.startswith("/") else f"{table.rstrip('/')}/{decoded}"


def table_uri(warehouse: Path | str, table: str) -> str:
    """The table's location; names are plain (letters, digits, `_`), so they never leave the warehouse."""
    if validate_table_name(table) == RESERVED:
        raise CompactorError(f"table name {table!r} is reserved for the compactor's own state")
    return f"{warehouse_uri(warehouse)}/{table}"


def state_uri(warehouse: Path | str, name: str) -> str:
    """Where the compactor keeps its own state in the warehouse (`<warehouse>/_compactor/<name>`)."""
    return f"{warehouse_uri(warehouse)}/{RESERVED}/{name}"
