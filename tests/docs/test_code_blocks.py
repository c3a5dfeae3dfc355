"""Every README and docs block that runs a command is run by a test, or marked as an excerpt.

A fenced block whose language is bash, sh, shell or console either

- is listed in `EXECUTED_BY`, from a distinctive piece of its text to the test that runs it
  (that test must exist), or
- has `<!-- excerpt -->` (or `<!-- excerpt: why -->`) on the line right before its fence:
  it shows a command against a live system (a broker, a cluster, a bucket) that no test
  runs as written.

The cheap blocks, which need neither Spark nor Kafka, are run here: `compactor config
validate` and `compactor plan` on the files in docs/examples/.
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

from tests.docs.pages import REPO, Block, command_blocks, the_block

HERE = "tests/docs/test_code_blocks.py"
BIN = Path(sys.executable).parent  # the venv's bin: `compactor` as the pages call it

EXECUTED_BY: dict[str, tuple[str, ...]] = {
    # README's quick start: `make demo` installs, then runs `compactor demo`, which the e2e test
    # runs (with fewer days); `make test` is the command .ci/run runs, as test_packaging checks
    "make demo     # creates .venv/": (
        "tests/e2e/test_demo_output.py::test_the_demo_prints_its_story_and_nothing_else",
        "tests/test_packaging.py::test_ci_runs_the_readme_test_command",
    ),
    # docs/deploying.md: the test pastes this block into bash against a standalone cluster
    "streaming_jobs/compact_segments.py --config": (
        "tests/e2e/test_spark_cluster.py::test_the_readme_spark_submit_line_merges_a_week_on_a_standalone_cluster",
    ),
    "compactor config validate tables.yaml": (f"{HERE}::test_the_readme_config_validates",),
    "$ compactor config validate examples/tables.yaml": (
        f"{HERE}::test_console_blocks_print_what_they_show",
    ),
    "--config examples/tables.yaml --segments docs/examples/january.jsonl --simulate": (
        f"{HERE}::test_the_dry_runs_plan_what_their_pages_say",
    ),
    "--config docs/examples/carbondata-minor.yaml": (f"{HERE}::test_the_dry_runs_plan_what_their_pages_say",),
    "--config docs/examples/hydrolix-default-pools.yaml": (
        f"{HERE}::test_the_dry_runs_plan_what_their_pages_say",
    ),
}


def registered(block: Block) -> list[str]:
    return [key for key in EXECUTED_BY if key in block.text]


def run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A block as a reader pastes it into bash, with the venv's `compactor` on the PATH."""
    if not (BIN / "compactor").exists():
        pytest.skip(f"no compactor script beside {sys.executable}: install the package (make unit)")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("block", command_blocks(), ids=lambda b: b.where)
def test_every_command_block_is_run_by_a_test_or_marked_as_an_excerpt(block: Block) -> None:
    keys = registered(block)
    assert keys or block.excerpt, (
        f"{block.where}: a {block.language} block that no test runs; add it to EXECUTED_BY in {HERE} "
        "with the test that runs it, or put <!-- excerpt --> on the line before its fence"
    )
    assert not (keys and block.excerpt), (
        f"{block.where}: marked as an excerpt, but {keys} says a test runs it"
    )


@pytest.mark.parametrize("key", list(EXECUTED_BY))
def test_each_registered_block_exists_once_and_its_tests_exist(key: str) -> None:
    matching = [b.where for b in command_blocks() if key in b.text]
    assert len(matching) == 1, f"{key!r} should name one command block, found {matching}"
    for test in EXECUTED_BY[key]:
        path, _, name = test.partition("::")
        source = REPO / path
        assert source.is_file(), f"{test}: no file {path}"
        assert re.search(rf"^def {re.escape(name)}\(", source.read_text(), flags=re.M), (
            f"{test}: no such test"
        )


def test_the_readme_config_validates(tmp_path: Path) -> None:
    """README's path to your own table: its YAML, saved as tables.yaml, passes its check."""
    readme = REPO / "README.md"
    (tmp_path / "tables.yaml").write_text(the_block("orders:", "yaml", readme).text)
    result = run(the_block("compactor config validate tables.yaml", "bash", readme).text, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "tables.yaml: valid (1 table(s): orders)\n"


def _console(block: Block) -> list[tuple[str, list[str]]]:
    """A console block's commands (after `$ `), each with the lines it shows as its output."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            assert steps, f"{block.where}: output before the first `$ ` command"
            steps[-1][1].append(line)
    return steps


def test_console_blocks_print_what_they_show() -> None:
    ran = 0
    for block in command_blocks():
        if block.language != "console" or f"{HERE}::test_console_blocks_print_what_they_show" not in [
            t for key in registered(block) for t in EXECUTED_BY[key]
        ]:
            continue
        for command, shown in _console(block):
            result = run(command, REPO)
            assert result.returncode == 0, f"{block.where}: {command}\n{result.stdout}{result.stderr}"
            assert result.stdout.splitlines() == shown, f"{block.where}: {command} printed {result.stdout!r}"
            ran += 1
    assert ran, "no console block is registered to this test"


# each checks a dry run's JSON against what its page says (the page's text, whitespace collapsed)


def _time_layers(plan: dict[str, Any], page: str) -> None:
    """getting-started.md: four weeks, then the month of those weeks and the last three days."""
    merges = plan["merges"]
    assert [m["level"] for m in merges] == ["week"] * 4 + ["month"]
    weeks = [m["output"]["id"] for m in merges[:4]]
    assert merges[-1]["inputs"] == [*weeks, "d20240129", "d20240130", "d20240131"]
    assert len(plan["segments"]) == 1


def _minor(plan: dict[str, Any], page: str) -> None:
    """carbondata.md: seven level-1 merges, two level-2 ones, six segments left."""
    levels = [m["level"] for m in plan["merges"]]
    assert levels.count("level-1") == 7 and levels.count("level-2") == 2, levels
    assert sorted(s["level"] for s in plan["segments"]) == [0, 0, 0, 1, 2, 2]
    assert [s["id"] for s in plan["segments"] if s["level"] == 0] == ["d20240129", "d20240130", "d20240131"]


def _default_pools(plan: dict[str, Any], page: str) -> None:
    """bin-packing.md: no merge, and every day is too wide for every default pool."""
    assert plan["merges"] == []
    reasons = {d["reason"] for ds in plan["explain"]["sales"].values() for d in ds}
    assert reasons == {"pool_width"}
    assert (
        "width 1 day, 0:00:00 is over the max_width of every pool its age and size fit (large 1:00:00)"
        in page
    )


DRY_RUNS: dict[str, Callable[[dict[str, Any], str], None]] = {
    "--config examples/tables.yaml --segments docs/examples/january.jsonl --simulate": _time_layers,
    "--config docs/examples/carbondata-minor.yaml": _minor,
    "--config docs/examples/hydrolix-default-pools.yaml": _default_pools,
}


@pytest.mark.parametrize("key", list(DRY_RUNS))
def test_the_dry_runs_plan_what_their_pages_say(key: str) -> None:
    block = the_block(key, "bash")
    page = block.page.read_text()
    config = re.search(r"--config (\S+)", block.text)
    assert config is not None
    if config[1].startswith("docs/examples/"):  # the page shows the file it runs
        assert (REPO / config[1]).read_text() in page, f"{block.where}: the page does not show {config[1]}"
    result = run(block.text, REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    DRY_RUNS[key](json.loads(result.stdout), " ".join(page.split()))
