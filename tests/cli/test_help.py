"""Every command and every option says what it is for in --help."""

from __future__ import annotations

from collections.abc import Iterator

import click

from compactor.cli.main import main


def commands(group: click.Group, prefix: str = "compactor") -> Iterator[tuple[str, click.Command]]:
    for name, command in group.commands.items():
        yield f"{prefix} {name}", command
        if isinstance(command, click.Group):
            yield from commands(command, f"{prefix} {name}")


def test_every_command_and_option_has_help_text() -> None:
    missing = [f"{name}: no help" for name, command in commands(main) if not command.help]
    missing += [
        f"{name} {param.opts[0]}"
        for name, command in [("compactor", main), *commands(main)]
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden and not param.help
    ]
    assert missing == []
