"""Operating the real job: its metrics and probes, scraped while it merges and dead-letters."""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from compactor.cli.main import main
from compactor.delta.paths import table_uri
from compactor.dev.broker_process import free_ports
from compactor.kafka.producer import EventProducer
from tests.helpers.jobs import TABLE, bulk_load, run_job, start_job, stop, wait_while_running
from tests.helpers.streaming import make_kafka

pytestmark = pytest.mark.integration

CONFIG_YAML = "defaults:\n  rules:\n    - rule: auto_merge\n      levels: [week]\n"


JOB_OWN = ("compactor_lease_", "compactor_driver_")


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The job's samples by name and labels; every one carries its shard (the one shard, 0)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    assert all(s.labels.get("shard") == "0" for s in samples if not s.name.startswith(JOB_OWN)), (
        "every sample carries its shard (the lease's and the driver's are the job's)"
    )
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "shard"))): s.value for s in samples
    }


def status(port: int, path: str) -> int:
    try:
        return int(urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def wait_for(check: Callable[[], bool], job: Any, what: str) -> None:
    wait_while_running(check, job, job.log, what)


def switch(kafka: Any, bootstrap: str, verb: str) -> None:
    result = CliRunner().invoke(
        main,
        ["table", verb, TABLE, "--bootstrap-servers", bootstrap, "--segments-topic", kafka.segments_topic],
    )
    assert result.exit_code == 0, result.output


def test_metrics_the_merging_switch_and_one_controller_on_the_real_job_across_a_take_over(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    config = tmp_path / "tables.yaml"
    config.write_text(CONFIG_YAML)
    warehouse, checkpoint = tmp_path / "warehouse", tmp_path / "cp"
    (port,) = free_ports(1, set())
    merged = ("compactor_merges_completed_total", (("rule", "auto_merge"), ("table", TABLE)))
    enabled = ("compactor_merging_enabled", (("table", TABLE),))
    events = ("compactor_events_total", ())

    job = start_job(config, warehouse, checkpoint, kafka_bootstrap, kafka, port)
    try:
        wait_for(lambda: status(port, "/healthz") == 200, job, "a health answer")
        wait_for(lambda: status(port, "/ready") == 200, job, "readiness")
        assert scrape(port)[events] == 0
        bulk_load(spark, warehouse, kafka, days=1, rows=10)  # the table exists before it is switched off
        wait_for(lambda: scrape(port)[events] == 1, job, "the first load")
        switch(kafka, kafka_bootstrap, "disable")
        bulk_load(spark, warehouse, kafka, days=6, rows=10, first_day=1)
        wait_for(lambda: scrape(port)[events] == 8, job, "the disable and six more loads")
        after = scrape(port)
        assert after[enabled] == 0 and merged not in after, "a full week, and no merge: merging is off"
        assert after[("compactor_actual_segments", (("table", TABLE),))] == 7
        assert after[("compactor_merge_candidates", (("table", TABLE),))] == 0, "nothing planned while off"
        second = start_job(config, warehouse, checkpoint, kafka_bootstrap, kafka, port)
        assert second.wait(timeout=60) == 4, "one controller per warehouse and topic"
        assert second.log.read_text().startswith("error: compactor-run@"), second.log.read_text()
        assert "already runs for warehouse" in second.log.read_text()
        standby = start_job(config, warehouse, checkpoint, kafka_bootstrap, kafka, port, "--standby")
        wait_for(lambda: "standby: compactor-run@" in standby.log.read_text(), standby, "the standby")
        output = stop(job)  # as an orchestrator stops it
        assert job.returncode == 0, output[-3000:]
        assert "Traceback" not in output and "compactor stopped" in output, output[-3000:]
    finally:
        stop(job)

    job = standby  # takes over at once: the stopped job left the lease's group
    try:
        wait_for(lambda: status(port, "/ready") == 200, job, "readiness after the take-over")
        assert scrape(port)[enabled] == 0, "still off after a restart"
        switch(kafka, kafka_bootstrap, "enable")
        EventProducer(kafka).send_all([(kafka.segments_topic, TABLE, b"\x00not an event", None)])
        dead = ("compactor_dead_letters_total", (("reason", "undecodable"),))
        wait_for(lambda: scrape(port).get(merged) == 1 and scrape(port).get(dead) == 1, job, "the merge")
        after = scrape(port)
        assert after[enabled] == 1
        assert after[("compactor_driver_memory_bytes", (("kind", "malloc_in_use"),))] > 1 << 20
        assert after[("compactor_driver_python_blocks", ())] > 100_000, "a job holds many objects"
        assert after[("compactor_merge_rows_total", (("direction", "in"), ("table", TABLE)))] == 70
        assert after[("compactor_merge_rows_total", (("direction", "out"), ("table", TABLE)))] == 70
        assert after[("compactor_actual_segments", (("table", TABLE),))] == 1
        assert after[("compactor_merge_efficiency", (("table", TABLE),))] == 1.0
        last_success = ("compactor_last_batch_success_timestamp_seconds", ())
        wait_for(lambda: scrape(port)[last_success] > time.time() - 600, job, "the batch's end")
        assert (
            after[("compactor_merge_duration_seconds_count", (("rule", "auto_merge"), ("table", TABLE)))] == 1
        )
        lag = ("compactor_consumer_lag_events", ())
        wait_for(lambda: not math.isnan(scrape(port).get(lag, math.nan)), job, "a lag reading")
        # a progress's lag is the topic's latest offsets, as its batch saw them, less the offsets it
        # processed: with no cap on a batch (maxOffsetsPerTrigger) each batch takes all there is
        assert scrape(port)[lag] == 0, "every event on the topic processed: none behind"
    finally:
        output = stop(job)
    assert f"table {TABLE}: auto_merge merged d00,d01,d02,d03,d04,d05,d06 -> m-" in output, output[-3000:]
    assert "dead letter (undecodable)" in output, "one line per merge and per dead letter by default"


def vacuum(config: Path, warehouse: Path, *extra: str) -> Any:
    return CliRunner().invoke(
        main, ["vacuum", "--config", str(config), "--warehouse", str(warehouse), *extra]
    )


def timeline(warehouse: Path, out: Path) -> str:
    """The picture's description (from its metadata), less the byte count."""
    args = ["timeline", "--table", TABLE, "--warehouse", str(warehouse), "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    with Image.open(out) as image:
        text = image.text["Description"]
    assert result.output.strip() == f"{out}: {text}"
    counts, _, merged = text.removeprefix(f"table {TABLE}: ").partition(" bytes, ")
    return counts.rsplit(", ", 1)[0] + ", " + merged.removesuffix(" in the last 6 h")


def test_vacuum_keeps_time_travel_inside_the_retention_and_deletes_replaced_files_after_it(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    warehouse = tmp_path / "warehouse"
    bulk_load(spark, warehouse, kafka, days=7, rows=10)
    config = tmp_path / "tables.yaml"
    config.write_text(CONFIG_YAML)
    args = [
        "--config", str(config), "--warehouse", str(warehouse), "--checkpoint", str(tmp_path / "cp"),
        "--bootstrap-servers", kafka_bootstrap, "--segments-topic", kafka.segments_topic,
        "--results-topic", kafka.results_topic, "--dead-letter-topic", kafka.dead_letter_topic,
    ]  # fmt: skip
    assert run_job(args, fault=None).returncode == 0
    path = table_uri(warehouse, TABLE)
    assert spark.read.format("delta").load(path).select("segment_id").distinct().count() == 1, "merged"

    shown = CliRunner().invoke(
        main, ["status", "--config", str(config), "--warehouse", str(warehouse), "--json"]
    )
    assert shown.exit_code == 0, shown.output
    (table,) = json.loads(shown.output)
    assert (table["table"], table["merging"], table["segments"], table["ready"]) == (TABLE, "on", 1, [])
    (last,) = table["last_merges"]
    assert (last["rule"], last["level"], last["inputs"]) == ("auto_merge", "week", 7)
    assert time.time() - datetime.fromisoformat(last["committed_at"]).timestamp() < 600
    assert timeline(warehouse, tmp_path / "merged.png") == "1 segments, 1 lanes; 1 written by merges"

    kept = vacuum(config, warehouse, "--dry-run")
    assert kept.exit_code == 0 and kept.output.startswith(f"{TABLE}: 0 file(s) replaced more than 7 days"), (
        kept.output
    )
    assert vacuum(config, warehouse).exit_code == 0
    version_0 = spark.read.format("delta").option("versionAsOf", 0).load(path)
    assert len(version_0.collect()) == 70, "time travel still reads its files"  # count() would use stats

    refused = tmp_path / "short.yaml"
    refused.write_text(CONFIG_YAML + "  vacuum:\n    retention: 1h\n")
    result = vacuum(refused, warehouse)
    assert result.exit_code == 2 and "shorter than Delta's safety check" in result.output

    short = tmp_path / "zero.yaml"
    short.write_text(CONFIG_YAML + "  vacuum:\n    retention: 0s\n    allow_short_retention: true\n")
    listed = vacuum(short, warehouse, "--dry-run")
    files = [line.strip() for line in listed.output.splitlines()[1:]]
    days = sorted({f.split("segment_id=")[1].split("/")[0] for f in files})
    assert days == [f"d0{d}" for d in range(7)], listed.output  # the replaced days' files; the week's stay
    assert vacuum(short, warehouse).exit_code == 0
    # no data file is left to delete (Delta lists the emptied partition directories until a next run)
    assert ".parquet" not in vacuum(short, warehouse, "--dry-run").output
    assert len(spark.read.format("delta").load(path).collect()) == 70, "the live version is whole"
    with pytest.raises(Exception, match=r"(?i)file|exist"):
        spark.read.format("delta").option("versionAsOf", 0).load(path).collect()
