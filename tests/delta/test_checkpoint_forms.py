"""Every checkpoint form of Delta's protocol, read by the driver from logs written to the letter of
PROTOCOL.md ("Checkpoints", "V2 Spec", "Sidecar Files"): V2 checkpoints UUID-named in JSON and in
Parquet and classic-named, with sidecars or with their files inline; multi-part ones; what the
reader does when `_last_checkpoint` is missing, stale or names a checkpoint that cannot be read;
and the forms it refuses (Delta is asked instead). No Spark: `test_checkpoints` has the same on
logs Delta wrote."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from compactor.delta.files import HadoopFiles
from compactor.delta.log.live_files import CheckpointUnreadable, load_live_files
from compactor.delta.log.reader import DeltaLogReader, checkpoint_name

PROTOCOL = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["v2Checkpoint"], "writerFeatures": ["v2Checkpoint"]}  # fmt: skip
METADATA = {
    "id": "t",
    "format": {"provider": "parquet", "options": {}},
    "schemaString": '{"type":"struct","fields":[]}',
    "partitionColumns": ["segment_id"],
    "configuration": {"delta.checkpointPolicy": "v2"},
}
ADD_TYPE = pa.struct(
    [
        ("path", pa.string()),
        ("partitionValues", pa.map_(pa.string(), pa.string())),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("stats", pa.string()),
    ]
)
REMOVE_TYPE = pa.struct(
    [("path", pa.string()), ("deletionTimestamp", pa.int64()), ("dataChange", pa.bool_())]
)
SIDECAR_TYPE = pa.struct(
    [("path", pa.string()), ("sizeInBytes", pa.int64()), ("modificationTime", pa.int64())]
)
CHECKPOINT_METADATA_TYPE = pa.struct([("version", pa.int64()), ("tags", pa.map_(pa.string(), pa.string()))])
PROTOCOL_TYPE = pa.struct(
    [
        ("minReaderVersion", pa.int32()),
        ("minWriterVersion", pa.int32()),
        ("readerFeatures", pa.list_(pa.string())),
        ("writerFeatures", pa.list_(pa.string())),
    ]
)
METADATA_TYPE = pa.struct(
    [
        ("id", pa.string()),
        ("format", pa.struct([("provider", pa.string()), ("options", pa.map_(pa.string(), pa.string()))])),
        ("schemaString", pa.string()),
        ("partitionColumns", pa.list_(pa.string())),
        ("configuration", pa.map_(pa.string(), pa.string())),
    ]
)
TXN_TYPE = pa.struct([("appId", pa.string()), ("version", pa.int64())])


class LocalFiles:
    """The few `HadoopFiles` operations the log reader uses, on this machine's disk."""

    def local_path(self, uri: str) -> str:
        return uri

    def exists(self, uri: str) -> bool:
        return os.path.exists(uri)

    def read_bytes(self, uri: str) -> bytes | None:
        try:
            with open(uri, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def read_text(self, uri: str) -> str | None:
        data = self.read_bytes(uri)
        return None if data is None else data.decode()

    def list_names(self, uri: str) -> list[str]:
        return os.listdir(uri) if os.path.isdir(uri) else []


def add(name: str, segment: str, rows: int = 5) -> dict[str, Any]:
    return {
        "path": f"segment_id={segment}/{name}.parquet",
        "partitionValues": {"segment_id": segment},
        "size": 100,
        "modificationTime": 1,
        "dataChange": True,
        "stats": json.dumps({"numRecords": rows}),
    }


class Log:
    """A table's `_delta_log`, written by hand as the protocol describes each file."""

    def __init__(self, root: Path) -> None:
        self.table = root / "t"
        self.dir = self.table / "_delta_log"
        (self.dir / "_sidecars").mkdir(parents=True)

    def reader(self) -> DeltaLogReader:
        return DeltaLogReader(cast(HadoopFiles, LocalFiles()), str(self.table), "t")

    def commit(self, version: int, *actions: dict[str, Any]) -> None:
        lines = [json.dumps({"commitInfo": {"operation": "WRITE"}}), *(json.dumps(a) for a in actions)]
        (self.dir / f"{version:020d}.json").write_text("\n".join(lines) + "\n")

    def drop_commits_before(self, version: int) -> None:
        for v in range(version):
            (self.dir / f"{v:020d}.json").unlink(missing_ok=True)

    def sidecar(self, adds: list[dict[str, Any]], removes: tuple[str, ...] = ()) -> dict[str, Any]:
        rows = [{"add": a, "remove": None} for a in adds]
        rows += [
            {"add": None, "remove": {"path": p, "deletionTimestamp": 1, "dataChange": True}} for p in removes
        ]
        schema = pa.schema([("add", ADD_TYPE), ("remove", REMOVE_TYPE)])
        table = pa.Table.from_pylist([_arrow_row(r) for r in rows], schema=schema)
        name = f"{uuid.uuid4()}.parquet"
        pq.write_table(table, self.dir / "_sidecars" / name)
        return {
            "path": name,
            "sizeInBytes": (self.dir / "_sidecars" / name).stat().st_size,
            "modificationTime": 1,
        }

    def v2_checkpoint(
        self,
        version: int,
        sidecars: list[dict[str, Any]],
        form: str = "json",
        inline: tuple[dict[str, Any], ...] = (),
        named: str = "uuid",
        hint: bool = True,
        extra: tuple[dict[str, Any], ...] = (),
        adds: int | None = None,
    ) -> str:
        """A V2 checkpoint: `checkpointMetadata`, the table's other actions, and `sidecar`
        actions (or its `add` actions inline); UUID-named or classic-named."""
        tags = {} if adds is None else {"numOfAddFiles": str(adds)}
        actions: list[dict[str, Any]] = [
            {"checkpointMetadata": {"version": version, "tags": tags}},
            {"protocol": PROTOCOL},
            {"metaData": METADATA},
            {"txn": {"appId": "loader", "version": 3}},
            *({"sidecar": s} for s in sidecars),
            *({"add": a} for a in inline),
            *extra,
        ]
        suffix = f".{uuid.uuid4()}" if named == "uuid" else ""
        name = f"{version:020d}.checkpoint{suffix}.{form}"
        if form == "json":
            (self.dir / name).write_text("\n".join(json.dumps(a) for a in actions) + "\n")
        else:
            _write_actions(self.dir / name, actions)
        if hint:
            info: dict[str, Any] = {"version": version, "size": len(actions)}
            if named == "uuid":
                info["v2Checkpoint"] = {"path": name, "sizeInBytes": 1, "modificationTime": 1}
            (self.dir / "_last_checkpoint").write_text(json.dumps(info))
        return name

    def classic_checkpoint(self, version: int, adds: list[dict[str, Any]], parts: int = 1) -> list[str]:
        """A V1 checkpoint: one file, or `parts` parts sharing the `add` actions."""
        base: list[dict[str, Any]] = [{"protocol": PROTOCOL}, {"metaData": METADATA}]
        names = []
        for i in range(1, parts + 1):
            mine = [{"add": a} for a in adds[i - 1 :: parts]]
            name = (
                f"{version:020d}.checkpoint.parquet"
                if parts == 1
                else f"{version:020d}.checkpoint.{i:010d}.{parts:010d}.parquet"
            )
            _write_actions(self.dir / name, (base if i == 1 else []) + mine)
            names.append(name)
        info: dict[str, Any] = {"version": version, "size": len(adds) + 2}
        if parts > 1:
            info["parts"] = parts
        (self.dir / "_last_checkpoint").write_text(json.dumps(info))
        return names


def _arrow_row(row: dict[str, Any]) -> dict[str, Any]:
    """Maps as Arrow takes them: (key, value) pairs."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict):
            value = {
                k: list(v.items()) if k in ("partitionValues", "tags", "configuration", "options") else v
                for k, v in value.items()
            }
            if "format" in value:
                value["format"] = {**value["format"], "options": list(value["format"]["options"].items())}
        out[key] = value
    return out


def _write_actions(path: Path, actions: list[dict[str, Any]]) -> None:
    """Actions as a checkpoint's Parquet holds them: a column per action, one set per row."""
    types = {
        "txn": TXN_TYPE,
        "add": ADD_TYPE,
        "remove": REMOVE_TYPE,
        "metaData": METADATA_TYPE,
        "protocol": PROTOCOL_TYPE,
        "checkpointMetadata": CHECKPOINT_METADATA_TYPE,
        "sidecar": SIDECAR_TYPE,
    }
    extra = {k for a in actions for k in a} - types.keys()
    schema = pa.schema([*types.items(), *((k, pa.struct([("x", pa.int64())])) for k in sorted(extra))])
    rows = [_arrow_row({name: a.get(name) for name in schema.names}) for a in actions]
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def paths(live: Any) -> set[str]:
    return {f.path for f in live.everything()}


@pytest.fixture
def log(tmp_path: Path) -> Log:
    return Log(tmp_path)


def _history(log: Log) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Versions 0 to 3: a, b and c added, a removed; d added at version 4 after the checkpoint."""
    a, b, c, d = add("a", "s1"), add("b", "s1"), add("c", "s2"), add("d", "s3")
    log.commit(0, {"protocol": PROTOCOL}, {"metaData": METADATA}, {"add": a})
    log.commit(1, {"add": b})
    log.commit(2, {"add": c}, {"txn": {"appId": "loader", "version": 3}})
    log.commit(3, {"remove": {"path": a["path"], "dataChange": True}})
    log.commit(4, {"add": d})
    return [b, c], d


@pytest.mark.parametrize("form", ["json", "parquet"])
def test_a_uuid_named_v2_checkpoint_is_read_through_its_sidecars(log: Log, form: str) -> None:
    live_adds, newer = _history(log)
    sidecars = [log.sidecar(live_adds[:1], removes=("segment_id=s1/a.parquet",)), log.sidecar(live_adds[1:])]
    log.v2_checkpoint(3, sidecars, form=form, adds=2)
    log.drop_commits_before(4)  # log cleanup: only the checkpoint holds versions 0 to 3

    live = load_live_files(log.reader(), log.reader().files, 4)
    assert paths(live) == {a["path"] for a in [*live_adds, newer]}
    assert (live.checkpoint, live.skipped, live.version) == (3, [], 4)
    assert live.protocol == PROTOCOL and live.metadata is not None and "loader" in live.txns
    assert {(f.segment, f.records) for f in live.everything()} == {("s1", 5), ("s2", 5), ("s3", 5)}


def test_a_classic_named_v2_checkpoint_with_sidecars_or_inline_files_is_read(log: Log) -> None:
    """Delta writes a classic-named copy of a V2 checkpoint for older readers, sidecars and all;
    delta-rs writes classic-named V2 checkpoints with the files inline."""
    live_adds, newer = _history(log)
    log.v2_checkpoint(3, [log.sidecar(live_adds)], form="parquet", named="classic")
    log.drop_commits_before(4)
    assert paths(load_live_files(log.reader(), log.reader().files, 4)) == {
        a["path"] for a in [*live_adds, newer]
    }

    (log.dir / f"{3:020d}.checkpoint.parquet").unlink()
    log.v2_checkpoint(3, [], form="parquet", named="classic", inline=tuple(live_adds))
    assert paths(load_live_files(log.reader(), log.reader().files, 4)) == {
        a["path"] for a in [*live_adds, newer]
    }


def test_a_checkpoint_no_last_checkpoint_names_is_found_in_the_listing(log: Log) -> None:
    """`_last_checkpoint` is a hint: gone, or naming an older checkpoint, the newest complete
    checkpoint the log holds is read (and the log reader's newest version found the same way)."""
    live_adds, newer = _history(log)
    log.v2_checkpoint(3, [log.sidecar(live_adds)], hint=False)
    log.drop_commits_before(4)
    reader = log.reader()
    assert reader.latest_version() == 4
    live = load_live_files(reader, reader.files, 4)
    assert paths(live) == {a["path"] for a in [*live_adds, newer]} and live.checkpoint == 3

    # a hint naming a checkpoint newer than the version asked for: an older one serves
    log.commit(5, {"add": add("e", "s4")})
    log.v2_checkpoint(5, [log.sidecar([*live_adds, newer, add("e", "s4")])])
    older = load_live_files(log.reader(), reader.files, 4)
    assert paths(older) == paths(live) and older.checkpoint == 3


def test_a_checkpoint_missing_a_sidecar_or_a_part_is_passed_over_for_an_older_one(log: Log) -> None:
    live_adds, newer = _history(log)
    log.classic_checkpoint(1, [add("a", "s1"), add("b", "s1")])
    sidecar = log.sidecar(live_adds)
    log.v2_checkpoint(3, [sidecar])
    log.drop_commits_before(1)
    (log.dir / "_sidecars" / sidecar["path"]).unlink()

    live = load_live_files(log.reader(), log.reader().files, 4)
    assert paths(live) == {a["path"] for a in [*live_adds, newer]}
    assert live.checkpoint == 1 and "the checkpoint's file is missing" in live.skipped[0]

    # a multi-part checkpoint missing a part is none (the protocol has readers ignore it)
    for name in log.classic_checkpoint(3, live_adds, parts=2)[1:]:
        (log.dir / name).unlink()
    live = load_live_files(log.reader(), log.reader().files, 4)
    assert live.checkpoint == 1 and paths(live) == {a["path"] for a in [*live_adds, newer]}


def test_a_multi_part_checkpoint_is_read_whole(log: Log) -> None:
    live_adds, newer = _history(log)
    assert len(log.classic_checkpoint(3, live_adds, parts=2)) == 2
    log.drop_commits_before(4)
    live = load_live_files(log.reader(), log.reader().files, 4)
    assert paths(live) == {a["path"] for a in [*live_adds, newer]} and live.checkpoint == 3


@pytest.mark.parametrize("form", ["json", "parquet"])
def test_a_checkpoint_of_a_form_the_driver_does_not_know_is_unreadable(log: Log, form: str) -> None:
    """An action no checkpoint of the protocol holds (an adaptive metadata tree's `checkpoint`,
    pointing at files elsewhere) is not skipped: the files it names would be missed."""
    live_adds, _ = _history(log)
    foreign = {"checkpoint": {"x": 1}}
    log.v2_checkpoint(3, [log.sidecar(live_adds)], form=form, extra=(foreign,))
    log.drop_commits_before(4)
    with pytest.raises(CheckpointUnreadable, match="'checkpoint'"):
        load_live_files(log.reader(), log.reader().files, 4)


def test_a_checkpoint_holding_fewer_files_than_it_records_is_unreadable(log: Log) -> None:
    live_adds, _ = _history(log)
    log.v2_checkpoint(3, [log.sidecar(live_adds[:1])], adds=2)
    log.drop_commits_before(4)
    with pytest.raises(CheckpointUnreadable, match="holds 1 add action"):
        load_live_files(log.reader(), log.reader().files, 4)


def test_checkpoint_names_are_told_apart() -> None:
    v = "00000000000000000010"
    assert checkpoint_name(f"{v}.checkpoint.parquet") == (10, "classic", None)
    assert checkpoint_name(f"{v}.checkpoint.0000000002.0000000003.parquet") == (10, "part", (2, 3))
    assert checkpoint_name(f"{v}.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.json") == (10, "uuid", None)
    assert checkpoint_name(f"{v}.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.parquet") == (
        10,
        "uuid",
        None,
    )
    for other in (
        f"{v}.json",
        f"{v}.crc",
        f"{v}.checkpoint.json",
        f".{v}.checkpoint.parquet.crc",
        "_last_checkpoint",
    ):
        assert checkpoint_name(other) is None
