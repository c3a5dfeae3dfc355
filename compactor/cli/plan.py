"""`compactor plan`: a dry run of the rules over a file of segments (JSON on stdout)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import click

from compactor.cli.options import instant, rule_choice


@click.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="Table config (YAML).",
)
@click.option(
    "--segments",
    "segments_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Segments in load order: a JSON array or JSON Lines.",
)
@click.option(
    "--replay-topic", help="Replay the loads recorded on this segments topic (a what-if; no writes)."
)
@click.option(
    "--from", "replay_from", help="With --replay-topic: an ISO time or an offset (default: the beginning)."
)
@click.option(
    "--bootstrap-servers",
    envvar="KAFKA_BOOTSTRAP_SERVERS",
    help="With --replay-topic (env KAFKA_BOOTSTRAP_SERVERS).",
)
@click.option(
    "--baseline",
    "baseline_path",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="With a replay: the current config, to compare the candidate (--config) with.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="With a replay: the segment count over time (.png, .svg or .html).",
)
@click.option("--now", callback=instant, help="Evaluation time (default: from the file, never the clock).")
@click.option(
    "--simulate", is_flag=True, help="Feed segments one at a time, cascading merges as the stream does."
)
@click.option("--rule", type=rule_choice, help="Evaluate this rule once, whatever its trigger.")
@click.option("--merge", "merge_ids", help="Validate and apply a manual merge of these comma-separated ids.")
@click.option("--explain", is_flag=True, help="Add each segment's decisions and reasons.")
def plan(
    config_path: Path,
    segments_path: Path | None,
    replay_topic: str | None,
    replay_from: str | None,
    bootstrap_servers: str | None,
    baseline_path: Path | None,
    plot_path: Path | None,
    now: datetime | None,
    simulate: bool,
    rule: str | None,
    merge_ids: str | None,
    explain: bool,
) -> None:
    """Dry run: what would the rules merge? Prints JSON; exit 2 on invalid input.

    With --replay-topic (or --segments and --baseline or --plot), a what-if: the recorded
    loads replayed under the config, with its merges, write amplification, segment count
    over time and debt, compared with --baseline's."""
    from compactor.cli.dry_run import read_segments, run_plan
    from compactor.config.loading import load_config_file

    config = load_config_file(config_path)
    if replay_topic or baseline_path or plot_path:
        from compactor.cli.replay import replay

        replay(config, segments_path, replay_topic, replay_from, bootstrap_servers, baseline_path, plot_path)
        return
    if segments_path is None:
        raise click.UsageError("give --segments FILE, or --replay-topic TOPIC")
    segments = read_segments(segments_path)
    ids = [i.strip() for i in merge_ids.split(",") if i.strip()] if merge_ids else []
    click.echo(json.dumps(run_plan(config, segments, now, simulate, rule, ids, explain), indent=2))
