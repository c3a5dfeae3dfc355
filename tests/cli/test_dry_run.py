"""`compactor plan`: the dry-run contract (JSON output, exit 2 on bad input)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from compactor.cli import main

AUTO = "defaults:\n  rules:\n    - rule: auto_merge\n      levels: [week, month]\n"
SALES = """
tables:
  sales:
    rules:
      - rule: minor
        level_thresholds: [4, 3]
      - rule: major
        size_threshold: 1024MB
        trigger: manual
"""
EXAMPLE_1 = [
    ("A", "2022-01-01", "2022-02-01"),
    ("B", "2022-02-01", "2022-02-07"),
    ("C", "2022-02-07", "2022-02-14"),
    ("D", "2022-02-14", "2022-02-21"),
    ("E", "2022-02-21", "2022-02-26"),
    ("F", "2022-02-26", "2022-02-27"),
    ("G", "2022-02-27", "2022-02-28"),
    ("H", "2022-02-28", "2022-03-01"),
]


def write(tmp_path: Path, config: str, segments: Any, jsonl: bool = False) -> tuple[Path, Path]:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(config)
    seg = tmp_path / ("segments.jsonl" if jsonl else "segments.json")
    if isinstance(segments, str):
        seg.write_text(segments)
    elif jsonl:
        seg.write_text("\n".join(json.dumps(s) for s in segments) + "\n")
    else:
        seg.write_text(json.dumps(segments))
    return cfg, seg


def records(rows: list[tuple[str, str, str]], table: str = "t") -> list[dict[str, Any]]:
    return [{"id": i, "table": table, "start": s, "end": e} for i, s, e in rows]


def plan(cfg: Path, seg: Path, *args: str) -> tuple[int, Any, str]:
    result = CliRunner().invoke(main, ["plan", "--config", str(cfg), "--segments", str(seg), *args])
    output = json.loads(result.stdout) if result.exit_code == 0 else None
    return result.exit_code, output, result.stderr


def test_simulate_reproduces_seed_example_1(tmp_path: Path) -> None:
    code, out, _ = plan(*write(tmp_path, AUTO, records(EXAMPLE_1)), "--simulate")
    assert code == 0
    assert [(m["rule"], m["level"], m["inputs"][:3]) for m in out["merges"]] == [
        ("auto_merge", "week", ["E", "F", "G"]),
        ("auto_merge", "month", ["B", "C", "D"]),
    ]
    x = out["merges"][0]["output"]["id"]
    assert out["merges"][1]["inputs"] == ["B", "C", "D", x, "H"]
    assert [(s["id"], s["start"][:10], s["end"][:10]) for s in out["segments"]] == [
        ("A", "2022-01-01", "2022-02-01"),
        (out["merges"][1]["output"]["id"], "2022-02-01", "2022-03-01"),
    ]
    assert out["merges"][1]["output"] == {
        "id": out["merges"][1]["output"]["id"],
        "start": "2022-02-01T00:00:00+00:00",
        "end": "2022-03-01T00:00:00+00:00",
        "records": 0,
        "bytes": 0,
        "sub_partitions": [],
    }


def test_one_evaluation_without_simulate_plans_one_merge_per_attempt(tmp_path: Path) -> None:
    days = [(n, f"2021-12-{d}", f"2021-12-{d + 1}") for n, d in zip("ABCD", range(27, 31), strict=True)]
    days += [
        ("E", "2021-12-31", "2022-01-01"),
        ("F", "2022-01-01", "2022-01-02"),
        ("G", "2022-01-02", "2022-01-03"),
    ]
    cfg, seg = write(
        tmp_path, "defaults:\n  rules:\n    - rule: auto_merge\n      levels: [week]\n", records(days)
    )
    code, out, _ = plan(cfg, seg)
    assert code == 0
    assert [m["inputs"] for m in out["merges"]] == [["A", "B", "C", "D", "E"]]
    code, out, _ = plan(cfg, seg, "--simulate")
    assert [(s["start"][:10], s["end"][:10]) for s in out["segments"]] == [
        ("2021-12-27", "2022-01-01"),
        ("2022-01-01", "2022-01-03"),
    ]


def test_minor_cascade_and_manual_major(tmp_path: Path) -> None:
    loads = [
        {
            "id": f"L{i:02d}",
            "table": "sales",
            "start": f"2024-01-{i:02d}",
            "end": f"2024-01-{i + 1:02d}",
            "bytes": 100 << 20,
        }
        for i in range(1, 13)
    ]
    cfg, seg = write(tmp_path, SALES, loads, jsonl=True)
    code, out, _ = plan(cfg, seg, "--simulate")
    assert code == 0
    assert [m["level"] for m in out["merges"]] == ["level-1", "level-1", "level-1", "level-2"]
    assert [s["level"] for s in out["segments"]] == [2]
    code, out, _ = plan(cfg, seg, "--rule", "major")
    assert code == 0
    assert [len(m["inputs"]) for m in out["merges"]] == [10]  # 10 x 100 MB < 1024 MB, the 11th would reach it


def test_manual_merge_valid_and_invalid(tmp_path: Path) -> None:
    cfg, seg = write(
        tmp_path,
        "defaults:\n  rules:\n    - rule: auto_merge\n      levels: [month]\n",
        records(EXAMPLE_1[:3]),
    )
    code, out, _ = plan(cfg, seg, "--merge", "B,C")
    assert code == 0
    assert [m["rule"] for m in out["merges"]] == ["manual"]
    assert out["segments"][0]["id"] == "A"
    code, _, err = plan(cfg, seg, "--merge", "A,C")
    assert code == 2 and "gap between A" in err and "C" in err
    code, _, err = plan(cfg, seg, "--merge", "B,Z")
    assert code == 2 and "no such segment(s): Z" in err


def test_now_defaults_to_the_latest_loaded_at_not_the_clock(tmp_path: Path) -> None:
    config = "defaults:\n  allowed_compaction_days: 1\n  rules:\n    - rule: minor\n      level_thresholds: [2, 0]\n"
    segs = [
        {"id": "old", "table": "t", "start": "2020-01-01", "end": "2020-01-02", "loaded_at": "2020-01-02"},
        {"id": "a", "table": "t", "start": "2020-01-05", "end": "2020-01-06", "loaded_at": "2020-01-06"},
        {"id": "b", "table": "t", "start": "2020-01-06", "end": "2020-01-07", "loaded_at": "2020-01-07"},
    ]
    cfg, seg = write(tmp_path, config, segs)
    code, out, _ = plan(cfg, seg, "--explain")
    assert code == 0
    assert [m["inputs"] for m in out["merges"]] == [["a", "b"]]
    assert out["explain"]["t"]["old"][0]["reason"] == "too_old"
    assert out["next_due"]["t"] == {  # `b` leaves the one-day window just after 2020-01-08
        "at": "2020-01-08T00:00:00.000001+00:00",
        "why": "a segment leaves the allowed_compaction_days window (1 days)",
        "rule": None,
    }
    code, out, _ = plan(cfg, seg, "--now", "2030-01-01T00:00:00")
    assert out["merges"] == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[{", "malformed JSON"),
        (
            [{"id": "a", "table": "t", "start": "2024-01-01"}],
            "record 1 (id 'a'): missing required field(s) end",
        ),
        ([{"id": "a", "table": "t", "start": "2024-01-02", "end": "2024-01-01"}], "is not after start"),
        ([{"id": "a", "table": "t", "start": "yesterday", "end": "2024-01-01"}], "not an ISO 8601 time"),
        (records([("a", "2024-01-01", "2024-01-02"), ("a", "2024-01-02", "2024-01-03")]), "appears twice"),
        (records([("a", "2024-01-01", "2024-01-03"), ("b", "2024-01-02", "2024-01-04")]), "overlaps a"),
        ([{"id": "a/../b", "table": "t", "start": "2024-01-01", "end": "2024-01-02"}], "segment id"),
    ],
)
def test_bad_input_exits_2_naming_the_record(tmp_path: Path, content: Any, message: str) -> None:
    code, _, err = plan(*write(tmp_path, AUTO, content))
    assert code == 2
    assert message in err


def test_overlap_is_normal_for_bin_pack_tables(tmp_path: Path) -> None:
    config = "defaults:\n  rules:\n    - rule: bin_pack\n"
    segs = [
        {"id": "a", "table": "t", "start": "2024-01-01T10:00:00", "end": "2024-01-01T10:20:00", "bytes": 100},
        {"id": "b", "table": "t", "start": "2024-01-01T10:10:00", "end": "2024-01-01T10:30:00", "bytes": 100},
    ]
    code, out, _ = plan(*write(tmp_path, config, segs), "--now", "2024-01-01T12:00:00")
    assert code == 0
    assert [(m["pool"], m["inputs"]) for m in out["merges"]] == [("large", ["a", "b"])]
    assert out["merges"][0]["output"]["start"] == "2024-01-01T10:00:00+00:00"


def test_a_bad_config_exits_2_naming_table_key_and_value(tmp_path: Path) -> None:
    bad = "tables:\n  sales:\n    rules:\n      - rule: major\n        size_threshold: 10XB\n"
    code, _, err = plan(*write(tmp_path, bad, records(EXAMPLE_1[:1])))
    assert code == 2
    assert "table 'sales'" in err and "size_threshold" in err and "10XB" in err
