"""`compactor plan --replay-topic`: a recorded stream of loads replayed under a candidate config."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import click

from compactor.config.tables import ProjectConfig
from compactor.domain.segments import Segment


def replay(
    config: ProjectConfig,
    segments_path: Path | None,
    topic: str | None,
    start: str | None,
    bootstrap_servers: str | None,
    baseline_path: Path | None,
    plot_path: Path | None,
) -> None:
    """Print the what-if as JSON (and draw it with --plot)."""
    from compactor.cli.dry_run import read_segments
    from compactor.config.loading import load_config_file
    from compactor.rules.what_if import differences, what_if

    if (topic is None) == (segments_path is None):
        raise click.UsageError("a replay reads one source: --replay-topic TOPIC or --segments FILE")
    source: dict[str, object]
    if topic is not None:
        loads, source = _from_topic(config, topic, start, bootstrap_servers)
    else:
        assert segments_path is not None
        loads, source = read_segments(segments_path), {"file": str(segments_path)}
    loads, repeated = _first_of_each(loads)
    candidate = what_if(config, loads)
    result: dict[str, object] = {
        "source": source | {"loads": len(loads), "repeated_loads": repeated},
        "candidate": candidate.to_json() | {"plans": [p.summary() for p in candidate.merges]},
    }
    runs = {"candidate": candidate}
    if baseline_path is not None:
        baseline = what_if(load_config_file(baseline_path), loads)
        runs["baseline"] = baseline
        result["baseline"] = baseline.to_json()
        result["differences"] = differences(candidate, baseline)
    if plot_path is not None:
        from compactor.observe.pictures.replay_plot import save

        save(runs, plot_path)
        result["plot"] = str(plot_path)
    click.echo(json.dumps(result, indent=2, default=str))


def _from_topic(
    config: ProjectConfig, topic: str, start: str | None, bootstrap_servers: str | None
) -> tuple[list[Segment], dict[str, object]]:
    from compactor.cli.options import kafka_settings
    from compactor.kafka.codecs import codec_for
    from compactor.kafka.replay import read_loads

    if not bootstrap_servers:
        raise click.UsageError("--replay-topic needs --bootstrap-servers (or KAFKA_BOOTSTRAP_SERVERS)")
    kafka = kafka_settings(bootstrap_servers, config)
    recorded = read_loads(kafka, topic, codec_for(kafka), _start(start))
    source: dict[str, object] = {
        "topic": topic,
        "from": start,
        "other_events": recorded.skipped,
        "undecodable": recorded.undecodable,
    }
    return recorded.loads, source


def _first_of_each(loads: list[Segment]) -> tuple[list[Segment], int]:
    """Each load once, as first announced (producers deliver at least once), and how many
    announcements repeated an earlier one."""
    first: dict[tuple[str, str], Segment] = {}
    for segment in loads:
        first.setdefault((segment.table, segment.id), segment)
    return list(first.values()), len(loads) - len(first)


def _start(value: str | None) -> datetime | int | None:
    """An offset (digits) or an ISO 8601 time."""
    if value is None:
        return None
    if value.isdigit():
        return int(value)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"--from {value!r} is neither an offset nor an ISO 8601 time") from None
    from compactor.domain.segments import utc

    return utc(moment)
