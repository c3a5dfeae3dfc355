"""Changing the shard count on a warehouse that ran as one job: refused without --reshard, and with
it the new shards' queries start where the old query's checkpoint had got to (real Spark
checkpoints): the events processed before are not processed again, the ones after are."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compactor.codec.events import default_codec
from compactor.delta.paths import state_uri
from compactor.kafka.shards import ShardLayout
from tests.helpers.jobs import COMPACTOR, bulk_load
from tests.helpers.streaming import consume_all, make_kafka

pytestmark = pytest.mark.integration

CONFIG = """
operations:
  shards: {shards}
defaults:
  rules:
    - rule: auto_merge
      levels: [week]
"""


def test_a_reshard_moves_on_from_where_the_old_layout_stopped(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique, partitions=4)
    layout = ShardLayout(kafka.segments_topic, 2, 4)
    tables = ["t0", next(f"t{n}" for n in range(1, 99) if layout.shard_of(f"t{n}") != layout.shard_of("t0"))]
    warehouse, checkpoint = tmp_path / "warehouse", tmp_path / "cp"

    def run(shards: int, *extra: str) -> subprocess.CompletedProcess[str]:
        config = tmp_path / f"tables-{shards}.yaml"
        config.write_text(CONFIG.format(shards=shards))
        return subprocess.run(
            [
                COMPACTOR, "run", "--config", str(config), "--warehouse", str(warehouse),
                "--checkpoint", str(checkpoint), "--bootstrap-servers", kafka_bootstrap,
                "--segments-topic", kafka.segments_topic, "--results-topic", kafka.results_topic,
                "--dead-letter-topic", kafka.dead_letter_topic, "--until-idle", *extra,
            ],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    for t in tables:
        bulk_load(spark, warehouse, kafka, 7, 20, 0, t)
    first = run(1)
    assert first.returncode == 0, first.stderr[-3000:]
    assert re.findall(r"idle after \d+ run\(s\): (\d+) events", first.stdout) == ["16"], first.stdout
    for t in tables:  # the second week waits in the topic while the count changes
        bulk_load(spark, warehouse, kafka, 7, 20, 7, t)

    refused = run(2)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert refused.stderr.strip().splitlines() == [
        f"error: operations.shards is 2 over the 4 partition(s) of {kafka.segments_topic}, but this warehouse's "
        "jobs run with 1 shard (one job; no shard record yet); stop every job and start one with --reshard "
        "to change it"
    ]

    moved = run(2, "--reshard")
    assert moved.returncode == 0, moved.stderr[-3000:]
    # each shard's query starts at the recorded offsets: the 16 events read before are not read
    # again; the 14 new ones are (7 loads per table), and the 2 merges' outputs announced
    events = sorted(int(n) for n in re.findall(r"idle after \d+ run\(s\): (\d+) events", moved.stdout))
    assert events == [8, 8], moved.stdout
    assert Path(state_uri(warehouse, f"shards-{kafka.segments_topic}.json")).exists()
    assert sorted(p.name for p in (checkpoint / "shards-2").iterdir()) == ["shard-0", "shard-1"]

    plans = [
        default_codec().decode_merge_result(m.value() or b"")["plan_id"]
        for m in consume_all(kafka_bootstrap, kafka.results_topic, 10)
    ]
    assert len(plans) == 4 and len(set(plans)) == 4, "each week of each table merged once"
