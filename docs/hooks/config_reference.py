"""MkDocs hook: the configuration reference, generated from the pydantic models in compactor/config/.

`docs/reference/configuration.md` holds the prose and one marker line, `<!-- config-reference -->`.
At build time the marker becomes one table per model reachable from `ProjectConfig` (the whole
file): every key with its type, default and description. A description is the field's docstring
(the models set `use_attribute_docstrings`); a field without one fails the build, so the page
cannot drift from the code.
"""

from __future__ import annotations

import inspect
import re
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import time, timedelta
from enum import Enum
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from compactor.config.tables import ProjectConfig, TableFields

MARKER = "<!-- config-reference -->"
TABLE = "<table>"  # stands for `defaults` and for `tables.<name>`: both hold a table's keys

# the config's own value types, known by the validator that parses them (compactor/config/units.py, kafka.py)
VALIDATED = {
    "_size": "size",
    "_duration": "duration",
    "_secret": "secret",
    "_setting": "text (kept secret)",
    "_replicas": "integer or range",
}
PLAIN = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "text",
    timedelta: "duration",
    time: "time of day",
    SecretStr: "secret",
}
BOUNDS = ((annotated_types.Ge, "ge", "≥"), (annotated_types.Gt, "gt", ">"), (annotated_types.Le, "le", "≤"))


@dataclass(frozen=True)
class Section:
    """One model's table, placed at the key path that first reaches it."""

    model: type[BaseModel]
    path: str

    @property
    def rule(self) -> str | None:
        return rule_name(self.model)

    @property
    def anchor(self) -> str:
        text = self.path.replace(TABLE, "table") + (f"-{self.rule}" if self.rule else "")
        return "config-" + (re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "file")

    @property
    def title(self) -> str:
        if self.model is ProjectConfig:
            return "Top-level keys"
        if self.model is TableFields:
            return "Table keys: `defaults` and `tables.<name>`"
        return f"`{self.path}` with `rule: {self.rule}`" if self.rule else f"`{self.path}`"


def rule_name(model: type[BaseModel]) -> str | None:
    """A rule model's `rule:` value (its discriminator), else None."""
    rule = model.model_fields.get("rule")
    if rule is None or get_origin(rule.annotation) is not Literal:
        return None
    return str(get_args(rule.annotation)[0])


def _inner(annotation: Any) -> Iterator[Any]:
    """An annotation and every type inside it (unions, containers, Annotated), outermost first."""
    yield annotation
    for arg in get_args(annotation):
        if arg is not Ellipsis and not isinstance(arg, str | int | bool | FieldInfo):
            yield from _inner(arg)


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def sections(section: Section | None = None, seen: set[type[BaseModel]] | None = None) -> list[Section]:
    """Every model reachable from the whole file, each once, each followed by the models in it."""
    section = section or Section(ProjectConfig, "")
    seen = seen if seen is not None else set()
    seen.add(section.model)
    ordered = [section]
    for name, info in fields(section.model):
        key = f"{section.path}.{name}" if section.path else name
        origins = [get_origin(m) for m in _inner(info.annotation)]
        if any(o in (tuple, list) for o in origins):
            key += "[]"
        elif any(isinstance(o, type) and issubclass(o, Mapping) for o in origins):
            key += ".<name>"
        for model in dict.fromkeys(m for m in _inner(info.annotation) if _is_model(m)):
            if model not in seen:
                ordered += sections(Section(model, TABLE if model is TableFields else key), seen)
    return ordered


def fields(model: type[BaseModel]) -> list[tuple[str, FieldInfo]]:
    """A model's fields in declaration order, a rule's `rule:` first."""
    return sorted(model.model_fields.items(), key=lambda item: item[0] != "rule")


def type_text(annotation: Any, links: Mapping[type[BaseModel], Section]) -> str:
    """How to write the value, in words: `size`, `list of one of hour, day, ...`, a link to a model."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _validated(args[1:]) or type_text(args[0], links)
    if origin in (Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if all(_is_model(a) and rule_name(a) for a in options):
            return "a rule: " + ", ".join(f"[`{rule_name(r)}`](#{links[r].anchor})" for r in options)
        text = " or ".join(type_text(a, links) for a in options)
        return f"{text} or null" if len(options) < len(args) else text
    if origin is Literal:
        return f"`{args[0]}`" if len(args) == 1 else "one of " + ", ".join(f"`{a}`" for a in args)
    if origin in (tuple, list):
        if len(args) == 2 and args[1] is Ellipsis:
            return f"list of {type_text(args[0], links)}"
        return "[" + ", ".join(type_text(a, links) for a in args) + "]"
    if isinstance(origin, type) and issubclass(origin, Mapping):
        return f"map of {type_text(args[0], links)} to {type_text(args[1], links)}"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "one of " + ", ".join(f"`{m.value}`" for m in annotation)
    if _is_model(annotation):
        return f"[object](#{links[annotation].anchor})"
    if annotation is Any:
        return "any"
    return PLAIN.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _validated(metadata: Sequence[Any]) -> str | None:
    """The config type a validator in the metadata parses (`size`, `duration`, ...), if any."""
    for item in metadata:
        name = getattr(getattr(item, "func", None), "__name__", "")
        if name in VALIDATED:
            return VALIDATED[name]
    return None


def field_type(info: FieldInfo, links: Mapping[type[BaseModel], Section]) -> str:
    """The field's type in words, with its bounds (`integer (≥ 1)`)."""
    text = _validated(info.metadata)
    if text is None:
        text = type_text(info.annotation, links)
    elif type(None) in get_args(info.annotation):
        text += " or null"
    bounds = [
        f"{sign} {getattr(item, attr)}"
        for item in info.metadata
        for kind, attr, sign in BOUNDS
        if isinstance(item, kind)
    ]
    bounds += [f"at least {m.min_length}" for m in info.metadata if isinstance(m, annotated_types.MinLen)]
    return f"{text} ({', '.join(bounds)})" if bounds else text


def _duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _size(value: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value % size == 0:
            return f"{value // size}{unit}"
    return f"{value}B"


def _yaml(value: Any, size: bool) -> str:
    """A default as it would be written in the YAML file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, timedelta):
        return _duration(value)
    if isinstance(value, int) and size:
        return _size(value)
    if isinstance(value, BaseModel):
        rule, name = rule_name(type(value)), getattr(value, "name", None)
        return f"{{rule: {rule}}}" if rule else str(name) if name else "{}"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_yaml(v, size) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_yaml(v, size)}" for k, v in value.items()) + "}"
    return str(value)


def default_text(info: FieldInfo, kind: str) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel) and not rule_name(type(value)):
        return "its defaults"
    return f"`{_yaml(value, kind.startswith('size'))}`"


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _intro(model: type[BaseModel]) -> str:
    doc = inspect.cleandoc(model.__doc__ or "")
    return _one_line(doc.split("\n\n")[0])


def render() -> str:
    """The reference: one heading and table per model."""
    ordered = sections()
    links = {s.model: s for s in ordered}
    out: list[str] = []
    for section in ordered:
        out += [f"### {section.title} {{#{section.anchor}}}", ""]
        if intro := _intro(section.model):
            out += [intro, ""]
        out += ["| key | type | default | description |", "| --- | --- | --- | --- |"]
        for name, info in fields(section.model):
            if not info.description:
                raise ValueError(
                    f"{section.model.__module__}.{section.model.__name__}.{name} has no description: "
                    "give the field a docstring (the configuration reference prints it)"
                )
            kind = field_type(info, links)
            out.append(f"| `{name}` | {kind} | {default_text(info, kind)} | {_one_line(info.description)} |")
        out.append("")
    return "\n".join(out)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs calls this for every page: the page with the marker gets the reference."""
    return markdown.replace(MARKER, render()) if MARKER in markdown else markdown
