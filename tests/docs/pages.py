"""The README, CONTRIBUTING.md and the docs pages as fenced blocks: what the docs tests read."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = (REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md")))
COMMAND_LANGUAGES = frozenset({"bash", "sh", "shell", "console"})
# the excerpt mark: an HTML comment on the line right before the fence (`<!-- excerpt: why -->`)
EXCERPT = re.compile(r"^\s*<!--\s*excerpt(\s*:[^>]*)?\s*-->\s*$")
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)[^`]*$")


@dataclass(frozen=True)
class Block:
    """A fenced block: where it is, its language, its text as a reader would paste it."""

    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    text: str
    excerpt: bool

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of a page, its lines dedented by the fence's own indent (list items)."""
    found: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[j]):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        excerpt = i > 0 and EXCERPT.match(lines[i - 1]) is not None
        text = "\n".join(body) + "\n"
        found.append(Block(page, i + 1, opening["info"].lower(), text, excerpt))
        i = j + 1
    return found


def every_block() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


def command_blocks() -> list[Block]:
    return [block for block in every_block() if block.language in COMMAND_LANGUAGES]


def the_block(containing: str, language: str | None = None, page: Path | None = None) -> Block:
    """The one block that contains `containing` (of this language, on this page)."""
    matches = [
        b
        for b in every_block()
        if containing in b.text
        and (language is None or b.language == language)
        and (page is None or b.page == page)
    ]
    assert len(matches) == 1, f"{len(matches)} blocks contain {containing!r}: {[b.where for b in matches]}"
    return matches[0]
