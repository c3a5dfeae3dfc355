"""`compactor plan` as a what-if: recorded loads replayed under a candidate and a baseline config."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner

from compactor.cli import main

DAYS = "defaults:\n  rules:\n    - rule: auto_merge\n      levels: [day]\n"
LAYERS = "defaults:\n  rules:\n    - rule: auto_merge\n      levels: [day, week]\n"
START = datetime(2024, 1, 1, tzinfo=UTC)  # a Monday


def hourly(hours: int) -> str:
    lines = []
    for h in range(hours):
        start = START + timedelta(hours=h)
        end = start + timedelta(hours=1)
        record = {"id": f"h{h:03d}", "table": "t", "start": start.isoformat(), "end": end.isoformat(),
                  "loaded_at": end.isoformat(), "bytes": 1000}  # fmt: skip
        lines.append(json.dumps(record))
    return "\n".join(lines)


def test_a_candidate_is_compared_with_the_current_config(tmp_path: Path) -> None:
    candidate, baseline, loads = (
        tmp_path / "candidate.yaml",
        tmp_path / "current.yaml",
        tmp_path / "loads.jsonl",
    )
    candidate.write_text(LAYERS)
    baseline.write_text(DAYS)
    loads.write_text(hourly(8 * 24) + "\n" + hourly(1))  # eight days, and the first load delivered twice
    plot = tmp_path / "replay.html"
    args = ["plan", "--config", str(candidate), "--segments", str(loads), "--baseline", str(baseline)]
    result = CliRunner().invoke(main, [*args, "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["source"] == {"file": str(loads), "loads": 192, "repeated_loads": 1}
    # days 1-6 merge by day; Sunday's hours go straight into the week; day 8 merges by day
    levels = [p["level"] for p in doc["candidate"]["plans"]]
    assert levels == ["day"] * 6 + ["week", "day"]
    assert doc["baseline"]["merges"] == 8
    cand, base = doc["candidate"], doc["baseline"]
    assert base["write_amplification"] == 1.0, "every hour rewritten once, by its day"
    assert cand["write_amplification"] == (192 + 6 * 24) * 1000 / 192000  # and six days again by the week
    assert (cand["final_segments"], base["final_segments"]) == (2, 8)
    assert cand["debt"] == {"t": {"plans": 0, "segments": 0, "bytes": 0}}
    only_candidate = doc["differences"]["merges_only_in_candidate"]
    assert [p["level"] for p in only_candidate] == ["week"] and len(only_candidate[0]["inputs"]) == 30
    assert [p["level"] for p in doc["differences"]["merges_only_in_baseline"]] == ["day"]  # the Sunday
    page = plot.read_text()
    assert "<svg" in page and "write amplification" in page


def test_a_replay_reads_one_source(tmp_path: Path) -> None:
    candidate = tmp_path / "candidate.yaml"
    candidate.write_text(DAYS)
    result = CliRunner().invoke(main, ["plan", "--config", str(candidate), "--plot", str(tmp_path / "x.png")])
    assert result.exit_code == 2 and "one source" in result.output
    result = CliRunner().invoke(main, ["plan", "--config", str(candidate)])
    assert result.exit_code == 2 and "--segments FILE, or --replay-topic TOPIC" in result.output


def test_a_topic_replay_says_what_it_lacks(tmp_path: Path) -> None:
    candidate = tmp_path / "candidate.yaml"
    candidate.write_text(DAYS)
    base = ["plan", "--config", str(candidate), "--replay-topic", "compactor.segments"]
    result = CliRunner(env={"KAFKA_BOOTSTRAP_SERVERS": ""}).invoke(main, base)
    assert result.exit_code == 2 and "needs --bootstrap-servers" in result.output
    result = CliRunner().invoke(main, [*base, "--bootstrap-servers", "127.0.0.1:1", "--from", "last tuesday"])
    assert result.exit_code == 2 and "neither an offset nor an ISO 8601 time" in result.output
