"""The Docker set-up cannot run here; check that its pieces fit together."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

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
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", env["CLUSTER_ID"]), "a fixed KRaft cluster id"
    # the broker's log dir is the named volume, so its data outlives `down`/`up` like the checkpoint
    (data_volume,) = kafka["volumes"]
    source, target = data_volume.split("#")[0].strip().split(":")
    assert source in compose["volumes"] and target == env["KAFKA_LOG_DIRS"]
    advertised = dict(item.split("://") for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert advertised["HOST"] == "localhost:29092" and "29092:29092" in kafka["ports"]
    compactor = services["compactor"]
    assert compactor["build"] == "."
    assert compactor["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert advertised["PLAINTEXT"] == compactor["environment"]["KAFKA_BOOTSTRAP_SERVERS"]
    for service in (kafka, compactor):
        assert service["init"] is True and service["healthcheck"]["test"]
    for volume in compactor["volumes"]:
        source = volume.split(":")[0]
        if source.startswith("./"):
            load_config_file(ROOT / source)  # the mounted config is valid
        else:
            assert source in compose["volumes"]


def test_compose_file_follows_the_compose_specification() -> None:
    import json
    from importlib.resources import files

    import jsonschema

    # check-jsonschema ships the Compose specification's JSON schema
    schema = json.loads((files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text())
    jsonschema.validate(yaml.safe_load((ROOT / "docker-compose.yml").read_text()), schema)
    broken = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    broken["services"]["kafka"]["restartt"] = "always"  # a misspelt key
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_dockerfile_keeps_maven_out_and_runs_as_a_user() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for path in re.findall(r"^COPY (?!--from)(\S+)", dockerfile, flags=re.M):
        assert (ROOT / path).exists(), f"Dockerfile copies missing {path}"
    stages = re.split(r"^FROM ", dockerfile, flags=re.M)[1:]
    final = stages[-1]
    assert "maven" not in final and ".m2" not in final, "Maven and its repository stay in the jars stage"
    assert "COPY --from=jars /opt/compactor-cache" in final
    assert "compactor jars --spark-only" in dockerfile, "only the Spark-side jars, not the broker's"
    assert re.search(r"^USER compactor$", final, flags=re.M), "not root"
    deps = dockerfile.index("pip install --no-cache-dir -r"), dockerfile.index("COPY compactor")
    assert deps[0] < deps[1], "dependencies are installed in a layer before the source is copied"
    assert 'CMD ["run", "--config", "/etc/compactor/tables.yaml"' in final


def test_the_image_can_carry_the_object_stores_connectors() -> None:
    """The jars stage passes its STORES build argument to `compactor jars`, and every store
    option it may carry is one the command takes (the final image cannot fetch a jar later)."""
    from compactor.cli.local import jars

    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r'^ARG STORES=""$', dockerfile, flags=re.M)
    (command,) = re.findall(r"^RUN compactor jars (.*?) >", dockerfile, flags=re.M)
    assert "${STORES}" in command
    args = command.replace("${STORES}", "--s3 --gcs").split()
    with jars.make_context("jars", args) as context:  # refuses an unknown option
        assert context.params["s3"] and context.params["gcs"] and context.params["archive"]


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make test" in ci


def test_ci_audits_the_dependencies_where_pypis_advisory_api_answers() -> None:
    """`make audit` in CI behind a probe of pip-audit's source; elsewhere named as skipped."""
    ci = (ROOT / ".ci" / "run").read_text()
    audit, tests = ci.index("\n  make audit\n"), ci.index("\nmake test")
    assert ci.index("pypi.org/pypi/pip/") < audit < tests, "probed, then audited, before the tests"
    assert "audit SKIPPED" in ci and "\naudit: " in (ROOT / "Makefile").read_text()


def test_resolved_jars_are_reused_without_running_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from compactor.errors import DependencyResolutionError
    from compactor.spark import jvm

    monkeypatch.setenv("COMPACTOR_CACHE_DIR", str(tmp_path))
    real_maven = jvm._run_maven
    runs: list[int] = []

    def fake_maven(name: str, artifacts: object, target: Path) -> None:
        runs.append(1)
        target.mkdir(parents=True)
        (target / jvm.MODULES_FILE).write_text("   org.apache.kafka:kafka-clients:jar:3.9.1:compile\n")
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


def _pyproject() -> dict[str, Any]:
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def declared_pythons() -> list[str]:
    spec = _pyproject()["project"]["requires-python"]
    low, high = re.fullmatch(r">=3\.(\d+),<3\.(\d+)", spec).groups()  # type: ignore[union-attr]
    return [f"3.{minor}" for minor in range(int(low), int(high))]


def test_linters_target_the_lowest_declared_python() -> None:
    config = _pyproject()["tool"]
    lowest = declared_pythons()[0]
    assert config["ruff"]["target-version"] == "py" + lowest.replace(".", "")
    assert config["mypy"]["python_version"] == lowest


@pytest.mark.integration
@pytest.mark.parametrize("python", declared_pythons()[1:])
def test_every_runtime_dependency_installs_on_each_declared_python(python: str, tmp_path: Path) -> None:
    """CI runs 3.11 only (no other CPython comes from the registries it reaches); this
    asks PyPI whether the runtime dependencies resolve to wheels for each other declared version."""
    import subprocess
    import sys

    requirements = tmp_path / "requirements.txt"
    # pyspark (an sdist) and delta-spark are pure Python for >=3.10; the rest must come as wheels
    compiled = [
        d for d in _pyproject()["project"]["dependencies"] if not d.startswith(("pyspark", "delta-spark"))
    ]
    requirements.write_text("\n".join([*compiled, "py4j"]))
    result = subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
            "--target", str(tmp_path / "target"), "--python-version", python,
            "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
            "--platform", "manylinux2014_x86_64", "--only-binary=:all:",
            "-r", str(requirements),
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
