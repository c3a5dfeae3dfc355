"""The job where Spark users run it: spark-submit on a standalone cluster, with their settings.

Each test starts its own JVM in a child process (spark-submit or the CLI), so the
session-wide test SparkSession is only used to write segments and read results.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable

from compactor.delta.paths import table_uri
from compactor.dev.broker_process import free_ports
from compactor.dev.spark_cluster import BIN, cluster_env, standalone_cluster
from compactor.domain.certificate import Certificate
from compactor.spark.jvm import artifact_name
from tests.helpers.jobs import TABLE, bulk_load, wait_while_running
from tests.helpers.streaming import checksum, make_kafka

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# The merge is written by Spark (not the driver's Arrow path), so that its certificate's row-hash
# counts run in the executors' JVM, from the jar spark-submit shipped them.
CONFIG_YAML = (
    "defaults:\n  rules:\n    - rule: auto_merge\n      levels: [week]\n"
    "operations:\n  driver_merge_max_bytes: 0\n"
)


def readme_block(containing: str) -> str:
    """The fenced bash block of docs/deploying.md that contains `containing`, as a user would paste it."""
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / "docs" / "deploying.md").read_text(), flags=re.S)
    (block,) = [b for b in blocks if containing in b]
    return block


def segment_ids(spark: Any, warehouse: Path) -> set[str]:
    table = spark.read.format("delta").load(table_uri(warehouse, TABLE))
    return {r.segment_id for r in table.select("segment_id").distinct().collect()}


def test_the_readme_spark_submit_line_merges_a_week_on_a_standalone_cluster(
    spark: Any, kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    warehouse = tmp_path / "warehouse"
    loaded = bulk_load(spark, warehouse, kafka, days=7, rows=20)
    before = checksum(spark.read.format("delta").load(table_uri(warehouse, TABLE)))
    config = tmp_path / "tables.yaml"
    config.write_text(CONFIG_YAML)
    topics = (
        f" --segments-topic {kafka.segments_topic} --results-topic {kafka.results_topic}"
        f" --dead-letter-topic {kafka.dead_letter_topic}"
    )
    with standalone_cluster(tmp_path / "cluster") as cluster:
        env = dict(
            cluster_env(),
            PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
            SPARK_MASTER=cluster.master_url,
            COMPACTOR_CONFIG=str(config),
            WAREHOUSE=str(warehouse),
            CHECKPOINT=str(tmp_path / "checkpoint"),
            KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
        )
        command = readme_block("compact_segments.py").rstrip() + topics
        log = tmp_path / "driver.log"
        with open(log, "w") as out:
            driver = subprocess.Popen(
                ["bash", "-c", command], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, text=True
            )
        try:
            wait_while_running(
                lambda: len(segment_ids(spark, warehouse)) == 1, driver, log, "a merge", 300, 2
            )
        finally:
            driver.terminate()
            driver.wait(timeout=60)
        driver_output = log.read_text()
        executor_logs = cluster.executor_logs()

    assert f"spark: master {cluster.master_url}" in driver_output
    assert len(loaded) == 7
    (merged,) = segment_ids(spark, warehouse)
    assert merged not in {s.id for s in loaded}
    assert checksum(spark.read.format("delta").load(table_uri(warehouse, TABLE))) == before
    (commit,) = DeltaTable.forPath(spark, table_uri(warehouse, TABLE)).history(1).collect()
    certificate = Certificate.from_dict(json.loads(commit["userMetadata"])["certificate"])
    assert certificate.inputs == certificate.output and certificate.output.rows == 7 * 20
    assert "will use Spark's Observation" not in driver_output, "the counts fell back"
    # spark-submit's jars (INFO "Added JAR ..."): each artifact once, none that Spark ships itself
    added = re.findall(r"Added JAR \S*/([^/\s]+\.jar) at", driver_output)
    artifacts = [_artifact(name) for name in added]
    assert "delta-spark_4.2_2.13" in artifacts and "spark-sql-kafka-0-10_2.13" in artifacts, added
    assert "compactor-row-hash-sum" in artifacts, added
    assert len(artifacts) == len(set(artifacts)), f"an artifact added twice: {sorted(added)}"
    assert not {_artifact(p.name) for p in _pyspark_jars()} & set(artifacts), sorted(added)
    assert executor_logs, "the worker launched no executor"
    ran = sum(path.read_text().count("Running task") for path in executor_logs)
    assert ran > 0, "the executor ran no task: the work stayed on the driver"


def test_spark_submit_without_the_jars_names_them_in_one_line(kafka_bootstrap: str, tmp_path: Path) -> None:
    config = tmp_path / "tables.yaml"
    config.write_text(CONFIG_YAML)
    result = subprocess.run(
        [
            str(BIN / "spark-submit"), "--master", "local[1]", str(REPO / "streaming_jobs" / "compact_segments.py"),
            "--config", str(config), "--warehouse", str(tmp_path / "w"), "--checkpoint", str(tmp_path / "cp"),
            "--bootstrap-servers", kafka_bootstrap,  # reachable: the lease comes before Spark
        ],
        env=cluster_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    # spark-submit's Python runner sends the driver's stderr to its stdout
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    (line,) = [x for x in output.splitlines() if x.startswith("error:")] or [output[-3000:]]
    assert "io.delta:delta-spark_4.2_2.13:4.4.0" in line and "spark-sql-kafka-0-10_2.13:4.2.0" in line
    assert "--packages" in line and "compactor jars --spark-submit-args" in line
    assert "Traceback" not in output


PROBE = """
import json, sys
from compactor.spark.session import build_spark
spark = build_spark("probe")
context = spark.sparkContext
print("PROBE " + json.dumps({
    "master": context.master,
    "ui": context.getConf().get("spark.ui.enabled"),
    "shuffle": spark.conf.get("spark.sql.shuffle.partitions"),
    "extensions": spark.conf.get("spark.sql.extensions"),
    "jars": context.getConf().get("spark.jars", ""),
    "jvm_zone": spark._jvm.java.util.TimeZone.getDefault().getID(),
}))
"""


def probe(env: dict[str, str]) -> dict[str, str]:
    import json

    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300
    )
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("PROBE ")] or [result.stderr[-3000:]]
    answer: dict[str, str] = json.loads(line.removeprefix("PROBE "))
    return answer


def test_pyspark_submit_args_beat_the_project_defaults() -> None:
    env = dict(
        os.environ,
        PYSPARK_SUBMIT_ARGS=(
            "--master local[1] --conf spark.sql.shuffle.partitions=7 --conf spark.ui.enabled=true "
            "--conf spark.sql.extensions=org.example.Missing pyspark-shell"
        ),
    )
    env.pop("SPARK_HOME", None)
    seen = probe(env)
    assert seen["master"] == "local[1]" and seen["ui"] == "true" and seen["shuffle"] == "7"
    assert seen["jvm_zone"] == "UTC"
    assert seen["extensions"] == "org.example.Missing,io.delta.sql.DeltaSparkSessionExtension"
    names = [Path(j).name for j in seen["jars"].split(",") if j]
    artifacts = [_artifact(n) for n in names]
    assert "delta-spark_4.2_2.13-4.4.0.jar" in names
    assert len(artifacts) == len(set(artifacts)), "an artifact added twice"
    spark_home_jars = {_artifact(p.name) for p in _pyspark_jars()}
    assert not spark_home_jars & set(artifacts), "a jar pyspark already ships was added again"


def _artifact(jar: str) -> str:
    """`io.delta_delta-spark_4.2_2.13-4.4.0.jar` (Ivy's name) or `delta-spark_4.2_2.13-4.4.0.jar` -> its artifact."""
    group, _, rest = jar.partition("_")
    return artifact_name(rest if rest and "." in group else jar)


def _pyspark_jars() -> list[Path]:
    from compactor.spark.jvm import pyspark_jars_dir

    return list(pyspark_jars_dir().glob("*.jar"))


def test_the_cli_master_and_conf_take_effect(
    kafka_bootstrap: str, unique: Callable[[str], str], tmp_path: Path
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    config = tmp_path / "tables.yaml"
    config.write_text(CONFIG_YAML)
    (ui_port,) = free_ports(1, set())
    result = subprocess.run(
        [
            str(BIN / "compactor"), "run", "--until-idle", "--config", str(config),
            "--warehouse", str(tmp_path / "w"), "--checkpoint", str(tmp_path / "cp"),
            "--bootstrap-servers", kafka_bootstrap, "--segments-topic", kafka.segments_topic,
            "--results-topic", kafka.results_topic, "--dead-letter-topic", kafka.dead_letter_topic,
            "--master", "local[1]", "--conf", "spark.ui.enabled=true", "--conf", f"spark.ui.port={ui_port}",
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "spark: master local[1], UI http://" in result.stdout, result.stdout
    assert f":{ui_port}" in result.stdout


def test_spark_defaults_conf_fills_what_the_user_did_not_set(tmp_path: Path) -> None:
    (tmp_path / "spark-defaults.conf").write_text("spark.sql.shuffle.partitions 11\nspark.master local[1]\n")
    env = dict(os.environ, SPARK_CONF_DIR=str(tmp_path))
    env.pop("SPARK_HOME", None)
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    seen = probe(env)
    assert seen["shuffle"] == "11" and seen["master"] == "local[1]"
    assert seen["ui"] == "false", "the project's default where the file says nothing"
