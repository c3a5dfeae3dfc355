"""The codec a deployment's Kafka settings ask for: where settings and codecs are both known."""

from __future__ import annotations

from compactor.codec.events import Codec, default_codec
from compactor.kafka.settings import KafkaSettings


def codec_for(kafka: KafkaSettings) -> Codec:
    """The codec the config's `kafka.encoding` asks for (single-object encoding by default)."""
    block = kafka.config
    if block is None or block.encoding == "single_object":
        return default_codec()
    from compactor.kafka.schema_registry import ConfluentRegistry

    return Codec(
        registry=ConfluentRegistry({k: v.get_secret_value() for k, v in block.schema_registry.items()})
    )
