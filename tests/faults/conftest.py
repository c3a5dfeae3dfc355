"""A Toxiproxy server per test worker, and a broker reachable through it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from compactor.dev.broker_process import free_ports
from tests.helpers.toxiproxy import ProxiedBroker, Proxy, Toxiproxy


@pytest.fixture(scope="session")
def toxiproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Toxiproxy]:
    server = Toxiproxy(tmp_path_factory.mktemp("toxiproxy")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def proxied_kafka(
    toxiproxy: Toxiproxy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ProxiedBroker, Proxy]]:
    """A broker of these tests' own (the shared one must stay healthy), and the proxy in front of
    its second listener: clients on `proxied_bootstrap` feel the proxy's toxics, others do not."""
    port = free_ports(1, set())[0]
    broker = ProxiedBroker(Path(tmp_path_factory.mktemp("faulty-kafka")), port)
    broker.start()
    proxy = toxiproxy.proxy("kafka", f"127.0.0.1:{broker.proxied_port}", listen=port)
    try:
        yield broker, proxy
    finally:
        broker.stop()
