"""The Python snippets of the README and the producers-and-consumers page are parts of the
scripts in examples/, which tests/e2e/test_examples.py runs: a snippet cannot drift from code
that works."""

from __future__ import annotations

import pytest

from tests.docs.pages import REPO, Block, blocks

PAGES = (REPO / "README.md", REPO / "docs" / "producers-consumers.md")
EXAMPLES = REPO / "examples"
RUN_BY = REPO / "tests" / "e2e" / "test_examples.py"


def python_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page) if b.language == "python"]


@pytest.mark.parametrize("block", python_blocks(), ids=lambda b: b.where)
def test_every_snippet_is_part_of_an_example_script(block: Block) -> None:
    holders = [p.name for p in EXAMPLES.glob("*.py") if block.text in p.read_text()]
    assert holders, f"{block.where}: this snippet is in no script of examples/ (copy it from one)"


def test_every_example_script_is_run_by_the_examples_test() -> None:
    run = RUN_BY.read_text()
    scripts = sorted(p.name for p in EXAMPLES.glob("*.py"))
    assert scripts and [s for s in scripts if f'"{s}"' not in run] == []


def test_the_pages_show_every_public_class() -> None:
    text = " ".join(b.text for b in python_blocks())
    for name in ("SparkLoader", "ArrowLoader", "StreamingSink", "ResultsFollower", "Codec"):
        assert name in text, name
