"""The `compactor` command line (entry point `compactor.cli:main`)."""

from compactor.cli.main import main

__all__ = ["main"]
