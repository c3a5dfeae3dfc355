"""The documentation site builds with `mkdocs build --strict`, and its generated references are whole."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from compactor.config.tables import ProjectConfig
from tests.docs.pages import REPO

DOCS_EXTRA = ("mkdocs", "material", "mkdocs_click", "mkdocs_include_markdown_plugin", "pymdownx")


def _hook() -> ModuleType:
    """docs/hooks/config_reference.py, the MkDocs hook that writes the configuration reference."""
    spec = importlib.util.spec_from_file_location("config_reference", REPO / "docs/hooks/config_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    missing = [name for name in DOCS_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"the docs extra is not installed ({', '.join(missing)}): pip install -e '.[docs]'")
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    configuration = (site / "reference" / "configuration" / "index.html").read_text()
    assert "max_concurrent_merges" in configuration and "config-reference" not in configuration
    assert "compactor-run" in (site / "reference" / "cli" / "index.html").read_text()


def test_the_configuration_reference_has_every_key_with_its_description() -> None:
    """The hook needs only pydantic: it runs without the docs extra too."""
    hook = _hook()
    text = hook.render()
    sections = hook.sections()
    assert sections[0].model is ProjectConfig
    for section in sections:
        for name, field in section.model.model_fields.items():
            assert field.description, f"{section.model.__name__}.{name} has no docstring"
            assert f"| `{name}` |" in text
    assert hook.on_page_markdown(f"intro\n\n{hook.MARKER}\n") == f"intro\n\n{text}\n"
