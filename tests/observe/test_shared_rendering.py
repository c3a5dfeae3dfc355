"""/metrics rendered once for the requests that arrive while it renders, and served again for a
while after: at thousands of tables a rendering takes seconds, and scrapers that time out and ask
again must not queue renderings faster than they end."""

from __future__ import annotations

import gzip
import threading
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from compactor.observe.metrics.server import REUSE_FACTOR, ProbeServer, SharedRendering


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class CountingApp:
    """A WSGI app that answers its call count, taking `duration` on the clock to render."""

    def __init__(self, clock: Clock, duration: float = 1.0) -> None:
        self.clock, self.duration, self.calls = clock, duration, 0
        self.release: threading.Event | None = None
        self.entered = threading.Event()

    def __call__(self, environ: dict[str, Any], respond: Callable[..., Any]) -> Iterable[bytes]:
        self.calls += 1
        self.entered.set()
        if self.release is not None:
            self.release.wait(10)
        self.clock.now += self.duration
        respond("200 OK", [("Content-Type", "text/plain")])
        return [f"rendering {self.calls} of {environ.get('HTTP_ACCEPT', '')}".encode()]


def get(app: SharedRendering, accept: str = "", query: str = "", method: str = "GET") -> tuple[str, bytes]:
    answered: list[str] = []
    environ = {"REQUEST_METHOD": method, "QUERY_STRING": query, "HTTP_ACCEPT": accept}
    body = b"".join(app(environ, lambda status, headers, exc_info=None: answered.append(status)))
    return answered[0], body


def test_a_rendering_is_served_again_for_reuse_factor_times_its_duration() -> None:
    clock = Clock()
    inner = CountingApp(clock, duration=1.0)
    app = SharedRendering(inner, clock)
    assert get(app) == ("200 OK", b"rendering 1 of ")
    clock.now += REUSE_FACTOR * 1.0 - 0.01
    assert get(app)[1] == b"rendering 1 of "
    clock.now += 0.02
    assert get(app)[1] == b"rendering 2 of "
    assert inner.calls == 2


def test_requests_that_arrive_during_a_rendering_wait_for_it_and_share_it() -> None:
    clock = Clock()
    inner = CountingApp(clock)
    inner.release = threading.Event()
    app = SharedRendering(inner, clock)
    bodies: list[bytes] = []
    threads = [threading.Thread(target=lambda: bodies.append(get(app)[1])) for _ in range(5)]
    threads[0].start()
    assert inner.entered.wait(10)
    for thread in threads[1:]:
        thread.start()
    inner.release.set()
    for thread in threads:
        thread.join(10)
    assert bodies == [b"rendering 1 of "] * 5 and inner.calls == 1


def test_each_format_has_its_own_rendering_and_queries_and_other_methods_pass_through() -> None:
    clock = Clock()
    inner = CountingApp(clock)
    app = SharedRendering(inner, clock)
    openmetrics = "application/openmetrics-text; version=1.0.0"
    assert get(app)[1] == b"rendering 1 of "
    assert get(app, openmetrics)[1] == f"rendering 2 of {openmetrics}".encode()
    assert get(app, openmetrics)[1] == f"rendering 2 of {openmetrics}".encode()
    assert get(app, query="name[]=x")[1] == b"rendering 3 of "
    assert get(app, method="OPTIONS")[1] == b"rendering 4 of "
    assert get(app)[1] == b"rendering 1 of "


def test_the_probe_server_serves_one_rendering_plain_and_gzipped_as_asked() -> None:
    registry = CollectorRegistry()
    counter = Counter("compactor_example", "An example.", registry=registry)
    server = ProbeServer(registry, {}, "127.0.0.1", 0).start()
    try:
        counter.inc(3)
        url = f"http://127.0.0.1:{server.port}/metrics"
        plain = urllib.request.urlopen(url, timeout=10).read().decode()
        request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.headers["Content-Encoding"] == "gzip"
            zipped = gzip.decompress(answer.read()).decode()
        assert "compactor_example_total 3.0" in plain and "compactor_example_total 3.0" in zipped
    finally:
        server.stop()
