"""The `kafka:` block: SASL and SSL settings shared by every Kafka client."""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, SecretStr, model_validator

from compactor.config.units import Frozen


def _secret(value: Any) -> Any:
    """`env:NAME` reads the secret from the environment, so it never sits in the file."""
    if isinstance(value, str) and value.startswith("env:"):
        name = value[4:]
        if name not in os.environ:
            raise ValueError(f"environment variable {name} is not set")
        return os.environ[name]
    return value


Secret = Annotated[SecretStr, BeforeValidator(_secret)]


class KafkaSecurity(Frozen):
    """SASL and SSL settings for every Kafka client (confluent-kafka and Spark's source).

    Secrets are `SecretStr`: printing or logging this object shows `**********`.
    """

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    ssl_ca_location: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> KafkaSecurity:
        if self.security_protocol.startswith("SASL") and not (
            self.sasl_mechanism and self.sasl_username and self.sasl_password
        ):
            raise ValueError(
                f"{self.security_protocol} needs sasl_mechanism, sasl_username and sasl_password"
            )
        return self
