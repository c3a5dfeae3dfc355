"""Every whole config file shown in the README and the docs loads as the job would load it."""

from __future__ import annotations

import pytest
import yaml

from compactor.config.loading import load_config
from compactor.config.tables import ProjectConfig
from tests.docs.pages import Block, every_block

TOP_LEVEL = frozenset(ProjectConfig.model_fields)


def whole_configs() -> list[Block]:
    """YAML blocks whose top-level keys are all the config file's (others are fragments)."""
    found = []
    for block in every_block():
        if block.language != "yaml":
            continue
        document = yaml.safe_load(block.text)
        if isinstance(document, dict) and document.keys() <= TOP_LEVEL:
            found.append(block)
    return found


@pytest.mark.parametrize("block", whole_configs(), ids=lambda b: b.where)
def test_a_config_shown_in_the_docs_loads(block: Block, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_PASSWORD", "secret")  # the examples' `env:` secrets
    monkeypatch.setenv("KAFKA_KEY_PASSWORD", "secret")
    monkeypatch.setenv("REGISTRY_USER_INFO", "user:secret")
    load_config(yaml.safe_load(block.text), block.where)
