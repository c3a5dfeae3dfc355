"""Toxiproxy, a real TCP proxy that injects faults, for the network-fault tests.

The server is Shopify's Go binary (`make test` installs it into `.tools/` with `go install`);
this is a thin client of its REST API (proxies, toxics), which is all the tests need.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from compactor.dev.broker_process import free_ports
from compactor.dev.kafka_broker import LocalKafkaBroker
from tests.helpers.tools import tool_binary


class Proxy:
    """One proxy: `listen` on 127.0.0.1 forwards to `upstream`, with toxics added and removed."""

    def __init__(self, server: Toxiproxy, name: str, listen: int) -> None:
        self.server, self.name, self.listen = server, name, listen

    @contextlib.contextmanager
    def toxic(
        self, kind: str, stream: str = "downstream", toxicity: float = 1.0, **attributes: Any
    ) -> Iterator[None]:
        """A toxic (latency, reset_peer, limit_data, timeout, ...) while the block runs."""
        name = f"{kind}-{stream}"
        body = {"name": name, "type": kind, "stream": stream, "toxicity": toxicity, "attributes": attributes}
        self.server.call("POST", f"/proxies/{self.name}/toxics", body)
        try:
            yield
        finally:
            self.server.call("DELETE", f"/proxies/{self.name}/toxics/{name}")

    @contextlib.contextmanager
    def cut(self) -> Iterator[None]:
        """No connection at all while the block runs: open ones are closed, new ones refused."""
        self.server.call("POST", f"/proxies/{self.name}", {"enabled": False})
        try:
            yield
        finally:
            self.server.call("POST", f"/proxies/{self.name}", {"enabled": True})


class Toxiproxy:
    """The server process on 127.0.0.1 and its API."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_ports(1, set())[0]
        self.log = workdir / "toxiproxy.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Toxiproxy:
        workdir = self.log.parent
        workdir.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(
                [str(tool_binary("toxiproxy-server", "TOXIPROXY_SERVER")), "-host", "127.0.0.1", "-port", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 20
        while True:
            try:
                self.call("GET", "/version")
                return self
            except OSError:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"Toxiproxy did not start: {self.log.read_text()[-2000:]}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=10)

    def proxy(self, name: str, upstream: str, listen: int | None = None) -> Proxy:
        port = listen or free_ports(1, set())[0]
        self.call("POST", "/proxies", {"name": name, "listen": f"127.0.0.1:{port}", "upstream": upstream})
        return Proxy(self, name, port)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                text = answer.read().decode()
        except urllib.error.HTTPError as refused:
            raise RuntimeError(
                f"Toxiproxy {method} {path}: {refused.code} {refused.read().decode()}"
            ) from None
        return json.loads(text) if text.strip().startswith(("{", "[")) else text  # /version: plain text


class ProxiedBroker(LocalKafkaBroker):
    """A broker with a second listener advertised at a proxy's address: clients that bootstrap
    there (`proxied_bootstrap`) reach the broker only through the proxy, metadata included, while
    those on `bootstrap` go direct."""

    def __init__(self, data_dir: Path, proxy_port: int) -> None:
        super().__init__(data_dir)
        self.proxied_port = free_ports(1, {self.port, self.controller_port, proxy_port})[0]
        self.proxy_port = proxy_port

    @property
    def proxied_bootstrap(self) -> str:
        return f"127.0.0.1:{self.proxy_port}"

    def server_properties(self) -> dict[str, str]:
        found = super().server_properties()
        found["listeners"] += f",PROXIED://127.0.0.1:{self.proxied_port}"
        found["advertised.listeners"] += f",PROXIED://127.0.0.1:{self.proxy_port}"
        found["listener.security.protocol.map"] += ",PROXIED:PLAINTEXT"
        return found
