"""The console wired: for a running job (`compactor run --console-port`) or for a warehouse with
no job of its own (`compactor console`), with or without a broker, read-only or with a token."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flask import Flask

from compactor.config.tables import ProjectConfig
from compactor.errors import ConfigError
from compactor.kafka.codecs import codec_for
from compactor.kafka.settings import KafkaSettings
from compactor.kafka.shards import ShardLayout
from compactor.observe.console.app import console_app
from compactor.observe.console.controls import Controls
from compactor.observe.console.guard import ConsoleGuard
from compactor.observe.console.snapshot import ShardRow
from compactor.observe.console.sources import ConsoleSource, JobSource, WarehouseSource
from compactor.observe.console.topic_tail import TopicTail
from compactor.observe.status.shard_status import ShardStatus

if TYPE_CHECKING:
    from compactor.delta.spark_store import SparkTableStore
    from compactor.stream.handler import BatchHandler

TOKEN_PREFIX = "env:"


def console_token(spec: str | None) -> str | None:
    """`env:NAME` -> the token held by the environment variable NAME (None: no token, read-only).
    The token itself is never given on the command line, where `ps` would show it."""
    if spec is None:
        return None
    if not spec.startswith(TOKEN_PREFIX) or len(spec) == len(TOKEN_PREFIX):
        raise ConfigError(
            f"--console-token {spec!r}: give env:NAME, the environment variable holding the token"
        )
    name = spec[len(TOKEN_PREFIX) :]
    token = os.environ.get(name, "")
    if len(token) < 16:
        raise ConfigError(
            f"--console-token {spec}: the environment variable {name} "
            + ("is not set" if not token else f"holds {len(token)} characters; use at least 16")
        )
    return token


@dataclass
class Console:
    app: Flask
    source: ConsoleSource
    tail: TopicTail | None
    controls: Controls | None

    def close(self) -> None:
        if self.tail is not None:
            self.tail.stop()
        if self.controls is not None:
            self.controls.close()
        stop = getattr(self.source, "stop", None)
        if stop is not None:
            stop()


def job_console(
    config: ProjectConfig,
    kafka: KafkaSettings,
    handlers: Callable[[], Sequence[BatchHandler]],
    shards: Callable[[], list[ShardRow] | None],
    token: str | None,
    guard: ConsoleGuard | None = None,
) -> Console:
    """The console of a running job: its handlers' state, its broker's topics, its controls."""
    tail = TopicTail(kafka, codec_for(kafka)).start()
    controls = Controls(kafka, codec_for(kafka))
    source = JobSource(handlers, config, tail, shards)
    return Console(console_app(source, tail, controls, token, guard=guard), source, tail, controls)


def warehouse_console(
    spark: Any,
    warehouse: str,
    config: ProjectConfig,
    store: SparkTableStore,
    kafka: KafkaSettings | None,
    shards: Callable[[], list[ShardRow] | None],
    token: str | None,
    refresh: float,
    guard: ConsoleGuard | None = None,
) -> Console:
    """The console of a warehouse with no job of its own; without `kafka`, the pages that need the
    broker say so and no control is offered."""
    tail = TopicTail(kafka, codec_for(kafka)).start() if kafka is not None else None
    controls = Controls(kafka, codec_for(kafka)) if kafka is not None else None
    source = WarehouseSource(spark, warehouse, config, store, tail, shards, refresh).start()
    return Console(console_app(source, tail, controls, token, guard=guard), source, tail, controls)


def shard_rows(
    section: tuple[ShardLayout, list[ShardStatus]] | None, queries: Mapping[int, str]
) -> list[ShardRow] | None:
    """The shards page's rows from `compactor status`'s shard section (None: not run in shards),
    with the queries this job runs for its own shards."""
    if section is None:
        return None
    return [
        ShardRow(s.index, s.owner, (queries[s.index],) if s.index in queries else (), s.behind, len(s.tables))
        for s in section[1]
    ]
