"""The command line: shared settings reach every command, every rule can be named, errors are one line."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from compactor.cli.main import main
from compactor.config.rules import RULE_NAMES

SSL_TO_NOWHERE = """
kafka:
  security_protocol: SSL
  ssl_ca_location: /nonexistent/ca.pem
tables:
  sales: {preserve_latest: 1}
"""


@pytest.mark.parametrize(
    "args",
    [
        ["request", "--table", "sales", "--rule", "auto_merge"],
        ["config", "apply"],  # the config file is its argument
    ],
    ids=["request", "config apply"],
)
def test_commands_that_produce_use_the_kafka_block_of_the_config(tmp_path: Path, args: list[str]) -> None:
    """The `kafka:` block (SASL/SSL) reaches every producer, not only the job's: here an SSL
    setting the client cannot load makes it refuse to start, which shows it was used."""
    config = tmp_path / "tables.yaml"
    config.write_text(SSL_TO_NOWHERE)
    where = [str(config)] if args[0] == "config" else ["--config", str(config)]
    result = CliRunner().invoke(main, [*args, *where, "--bootstrap-servers", "127.0.0.1:1"])
    assert result.exit_code != 0
    assert "ssl.ca.location" in f"{result.output} {result.exception}"


@pytest.mark.parametrize("command", ["plan", "request"])
def test_every_rule_can_be_named_where_a_rule_is_asked_for(command: str) -> None:
    option = next(p for p in main.commands[command].params if p.name == "rule")
    assert isinstance(option.type, click.Choice) and tuple(option.type.choices) == RULE_NAMES
    assert {"refresh", "upsert_compaction"} <= set(option.type.choices)


def test_an_invalid_config_is_one_line_per_problem_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("tables:\n  sales: {preserve_latest: -1}\n")
    segments = tmp_path / "segments.json"
    segments.write_text("[]")
    result = CliRunner().invoke(main, ["plan", "--config", str(config), "--segments", str(segments)])
    assert result.exit_code == 2
    assert result.output.startswith("error: invalid config")
    assert "table 'sales', key preserve_latest: value -1" in result.output
    assert "Traceback" not in result.output


def test_config_validate_checks_the_merged_settings_of_each_table(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("tables:\n  a: {}\n  b:\n    vacuum: {retention: 14d}\n")
    result = CliRunner().invoke(main, ["config", "validate", str(good)])
    assert result.exit_code == 0 and result.output == f"{good}: valid (2 table(s): a, b)\n"
    bad = tmp_path / "bad.yaml"
    bad.write_text("tables:\n  t:\n    vacuum: {retention: 1h}\n")
    result = CliRunner().invoke(main, ["config", "validate", str(bad)])
    assert result.exit_code == 2
    assert "table 't', key vacuum" in result.output and "shorter than Delta's safety check" in result.output


def test_config_show_prints_the_settings_as_the_job_reads_them_with_every_secret_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    monkeypatch.setenv("SHOW_TEST_PASSWORD", "from-the-env-8c1f")
    config = tmp_path / "tables.yaml"
    config.write_text(
        "kafka:\n  security_protocol: SASL_SSL\n  sasl_mechanism: SCRAM-SHA-512\n  sasl_username: job\n"
        "  sasl_password: env:SHOW_TEST_PASSWORD\n  librdkafka: {ssl.key.password: in-the-file-2b9e}\n"
        "  schema_registry: {url: 'http://registry', basic.auth.user.info: 'u:registry-3d0a'}\n"
        "spark: {spark.hadoop.fs.s3a.secret.key: s3-secret-77aa, spark.hadoop.fs.s3a.endpoint: 'http://s3'}\n"
        "tables:\n  a: {checkpoint_every: 20}\n"
    )
    result = CliRunner().invoke(main, ["config", "show", str(config)])
    assert result.exit_code == 0, result.output
    for secret in ("from-the-env-8c1f", "in-the-file-2b9e", "registry-3d0a", "s3-secret-77aa"):
        assert secret not in result.output
    shown = yaml.safe_load(result.output)
    masked = "**********"
    assert shown["kafka"]["sasl_username"] == "job" and shown["kafka"]["sasl_password"] == masked
    assert shown["kafka"]["librdkafka"] == {"ssl.key.password": masked}
    assert shown["spark"] == {
        "spark.hadoop.fs.s3a.secret.key": masked,
        "spark.hadoop.fs.s3a.endpoint": "http://s3",
    }
    assert shown["tables"]["a"]["checkpoint_every"] == 20, "the table's own over the defaults"
    assert shown["operations"]["max_concurrent_merges"] == 4, "defaults filled in"
    only = yaml.safe_load(CliRunner().invoke(main, ["config", "show", str(config), "--table", "b"]).output)
    assert list(only) == ["tables"] and only["tables"]["b"]["checkpoint_every"] == 10, (
        "unlisted: the defaults"
    )


def test_version() -> None:
    from importlib.metadata import version

    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and result.output == f"compactor, version {version('streaming-compactor')}\n"


def test_librdkafka_stays_quiet_in_a_command_but_a_job_logs_its_fatal_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command's failure is its one `error:` line, even when librdkafka calls it fatal (a broker
    that refuses the principal); a running job keeps librdkafka's fatal errors in its log."""
    import logging

    from compactor.job import run as job_run
    from compactor.kafka.settings import LIBRDKAFKA_LOG

    config = tmp_path / "tables.yaml"
    config.write_text("tables:\n  a: {}\n")
    assert CliRunner().invoke(main, ["config", "validate", str(config)]).exit_code == 0
    assert not LIBRDKAFKA_LOG.isEnabledFor(logging.CRITICAL)
    assert CliRunner().invoke(main, ["-v", "config", "validate", str(config)]).exit_code == 0
    assert LIBRDKAFKA_LOG.isEnabledFor(logging.DEBUG)
    levels: list[int] = []
    monkeypatch.setattr(job_run, "run_job", lambda *args: levels.append(LIBRDKAFKA_LOG.getEffectiveLevel()))
    where = ["--warehouse", str(tmp_path / "w"), "--checkpoint", str(tmp_path / "cp")]
    ran = CliRunner().invoke(
        main, ["run", "--config", str(config), *where, "--bootstrap-servers", "127.0.0.1:1"]
    )
    assert ran.exit_code == 0, ran.output
    assert levels == [logging.CRITICAL]
