"""The Docker set-up cannot run here; check that its pieces fit together."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from compactor.config.loading import load_config_file

ROOT = Path(__file__).resolve().parents[1]


def test_compose_runs_kafka_in_kraft_mode_and_the_compactor_against_it() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"kafka", "compactor"}
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    advertised = env["KAFKA_ADVERTISED_LISTENERS"]
    compactor = services["compactor"]
    assert compactor["build"] == "."
    assert compactor["depends_on"]["kafka"]["condition"] == "service_healthy"
    bootstrap = compactor["environment"]["KAFKA_BOOTSTRAP_SERVERS"]
    assert f"PLAINTEXT://{bootstrap}" == advertised
    for volume in compactor["volumes"]:
        source = volume.split(":")[0]
        if source.startswith("./"):
            load_config_file(ROOT / source)  # the mounted config is valid
        else:
            assert source in compose["volumes"]


def test_dockerfile_installs_the_package_and_runs_the_job() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for path in re.findall(r"^COPY (\S+)", dockerfile, flags=re.M):
        assert (ROOT / path).exists(), f"Dockerfile copies missing {path}"
    assert "openjdk-17" in dockerfile and "compactor jars" in dockerfile
    assert 'CMD ["run", "--config", "/etc/compactor/tables.yaml"' in dockerfile


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make test" in ci


def test_resolved_jars_are_reused_without_running_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from compactor import jvm
    from compactor.errors import DependencyResolutionError

    monkeypatch.setenv("COMPACTOR_CACHE_DIR", str(tmp_path))
    real_maven = jvm._run_maven
    runs: list[int] = []

    def fake_maven(artifacts: object, target: Path) -> None:
        runs.append(1)
        target.mkdir(parents=True)
        (target / "kafka-clients-3.9.1.jar").write_bytes(b"")
        (target / "jackson-core-2.16.2.jar").write_bytes(b"")

    monkeypatch.setattr(jvm, "_run_maven", fake_maven)
    present = tmp_path / "pyspark-jars"
    present.mkdir()
    (present / "jackson-core-2.15.0.jar").write_bytes(b"")  # pyspark ships its own jackson
    first = jvm.resolve("t", jvm.KAFKA_BROKER_ARTIFACTS, skip_present_in=present)
    second = jvm.resolve("t", jvm.KAFKA_BROKER_ARTIFACTS, skip_present_in=present)
    assert [p.name for p in first] == [p.name for p in second] == ["kafka-clients-3.9.1.jar"]
    assert runs == [1], "the second start downloads nothing"
    monkeypatch.setattr(jvm, "_run_maven", real_maven)
    monkeypatch.setattr(jvm.shutil, "which", lambda _: None)
    with pytest.raises(DependencyResolutionError, match="Maven"):
        jvm.resolve("other", (jvm.Artifact("g:a:1"),))
