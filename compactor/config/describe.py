"""Validation errors as operators read them: which table, which key, which value, what is wrong."""

from __future__ import annotations

from pydantic import ValidationError

from compactor.config.rules import RULE_NAMES

_TAGS = {"function-before[_size()]", "function-before[_duration()]", *RULE_NAMES}


def _location(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in _TAGS:
            continue  # discriminator and validator tags add nothing for the reader
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def describe(error: ValidationError, source: str, prefix: tuple[str, ...] = ()) -> str:
    """Every problem of `error`, one line each; `prefix` locates a document inside the file."""
    return "\n".join([f"invalid config{' ' + source if source else ''}:", *problems(error, prefix)])


def problems(error: ValidationError, prefix: tuple[str, ...] = ()) -> list[str]:
    """One line per problem: the table, the key and its value, and what is wrong."""
    lines = []
    for item in error.errors():
        loc = (*prefix, *item["loc"])
        table = f"table {loc[1]!r}, " if loc[:1] == ("tables",) and len(loc) > 1 else ""
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        if not item["loc"]:  # a check across keys: the message names them
            lines.append(f"  {table or 'defaults: ' if prefix else table}{message}")
            continue
        where = _location(loc[2:] if table else loc)
        value = repr(item["input"])
        value = value if len(value) <= 200 else value[:200] + f"... ({len(value)} characters)"
        lines.append(f"  {table}key {where}: value {value}: {message}")
    return lines
