"""The rooms' import rules, read from the architecture page's table, and the imports that break them.

The table (docs/architecture.md) is the one place the rules are settled: each row names rooms
(the first folder under the package, or a folder inside one that has a row of its own, such as
`stream/merging`) and what they may import besides themselves, errors and domain. A room may
import the rooms inside it, and a room allowed to import another from outside may import the
rooms inside that one too (the inner rooms' own rows name the siblings each may use);
`everything` allows every room; `everything above` every room of the rows above.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

HEADER = "| room | may import (besides itself, errors and domain) |"
ALWAYS = frozenset({"errors", "domain"})
WIRING = "the wiring"  # the package's own top-level modules (its __init__ and entry points)
EVERYTHING = "*"


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    room: str
    imported: str
    target_room: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.room}/ may not import {self.target_room}/ ({self.imported})"


def read_table(markdown: str) -> dict[str, frozenset[str]]:
    """Room -> the rooms it may import, from the Markdown table under HEADER."""
    lines = markdown.splitlines()
    try:
        start = lines.index(HEADER)
    except ValueError:
        raise AssertionError(f"no import-rule table (header {HEADER!r}) in the page") from None
    rules: dict[str, frozenset[str]] = {}
    for row in lines[start + 2 :]:
        if not row.startswith("|"):
            break
        rooms_cell, allowed_cell = (c.strip() for c in row.strip("|").split("|")[:2])
        rooms = [_room_name(r) for r in rooms_cell.split(",")]
        allowed = _allowed(allowed_cell, above=set(rules))
        for room in rooms:
            rules[room] = allowed
    return rules


def _room_name(cell: str) -> str:
    name = cell.strip().strip("`").removesuffix("/")
    return WIRING if name == WIRING else name


def _allowed(cell: str, above: set[str]) -> frozenset[str]:
    """The rooms a cell names: text in parentheses and after a semicolon is commentary."""
    text = re.sub(r"\([^)]*\)", "", cell).split(";")[0].strip().replace("`", "")
    if text == "everything":
        return frozenset({EVERYTHING})
    if text == "everything above":
        return frozenset(above)
    names = {w.strip().removesuffix("/") for w in re.split(r",| and ", text)}
    # third-party libraries and "nothing else" name no room
    return frozenset(
        n for n in names if re.fullmatch(r"[a-z_]+(/[a-z_]+)*", n) and n not in {"stdlib", "nothing else"}
    )


def room_of(package: Path, path: Path, rooms: Collection[str] = ()) -> str:
    """The room of a module file: the deepest of its folders under the package that is one of
    `rooms` (a room inside a room), else its first folder; the wiring for the package's
    top-level modules (`errors.py` is the errors room)."""
    parts = path.relative_to(package).parts
    if len(parts) > 1:
        return _deepest(parts[:-1], rooms)
    stem = Path(parts[0]).stem
    return stem if stem == "errors" else WIRING


def _deepest(folders: Sequence[str], rooms: Collection[str]) -> str:
    for depth in range(len(folders), 1, -1):
        nested = "/".join(folders[:depth])
        if nested in rooms:
            return nested
    return folders[0]


def imports(path: Path, package_name: str) -> list[tuple[int, str]]:
    """(line, module) for every import of the package's own modules in one file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            raise AssertionError(f"{path}:{node.lineno}: a relative import; name the room")
    return [(line, m) for line, m in found if m.split(".")[0] == package_name]


def target_room(package: Path, module: str, rooms: Collection[str] = ()) -> str:
    """The room an imported module lives in (`compactor.delta.paths.table_uri` -> delta,
    `compactor.stream.merging.slots.Slots` -> stream/merging when that is a room)."""
    parts = module.split(".")[1:]
    if not parts:
        return WIRING
    if (package / parts[0]).is_dir():
        return _deepest(parts, rooms)
    return parts[0] if parts[0] == "errors" else WIRING


def violations(package: Path, rules: dict[str, frozenset[str]]) -> list[Violation]:
    """Every import in `package` that its room's rule does not allow, in file and line order."""
    found: list[Violation] = []
    for path in sorted(package.rglob("*.py")):
        room = room_of(package, path, rules)
        if room not in rules:
            raise AssertionError(f"{path}: room {room!r} is not in the import-rule table")
        allowed = rules[room]
        for line, module in imports(path, package.name):
            target = target_room(package, module, rules)
            inside = target.startswith(room + "/")  # a room may import the rooms inside it
            if target == room or inside or target in ALWAYS or EVERYTHING in allowed or target in allowed:
                continue
            # a room allowed from outside comes with the rooms inside it; its own inner rooms
            # name the siblings they may import
            if any(target.startswith(a + "/") and not room.startswith(a + "/") for a in allowed):
                continue
            found.append(Violation(path, line, room, module, target))
    return found
