"""`/metrics`, `/healthz` and `/ready` on one port, in a daemon thread beside the job; and the
operator's console on every other path of that port when it is given one.

prometheus_client's WSGI app answers `/metrics`; the two probes answer
`200 ok` or `503` with the first check that failed, so a Kubernetes probe or an
operator's curl says why the job is not ready.

The server is waitress, inside the job's driver: a fixed pool of `THREADS` workers (a flood of
requests queues, it never starts a thread per connection as wsgiref's threading server did), at
most `CONNECTION_LIMIT` open connections, and a connection idle for `CHANNEL_TIMEOUT_S` closed,
so a client that opens connections and sends nothing (slowloris) holds no worker.

`/metrics` is rendered once for every request that arrives while it renders, and that rendering
is served again for `REUSE_FACTOR` times as long as it took: beside 5,000 tables one takes over a
second of the driver's Python (7.8 MB of text), and a scraper that gave up and asked again (the
benchmark's 5 s timeout, every second) queued renderings faster than they ended, so the endpoint
stopped answering at all. Now asking more often costs the job no more than a fifth of a core. Waitress is
pure Python, kept up by the Pylons project, and serves any WSGI app (Flask's and
prometheus_client's alike); cheroot would do too, with more to configure for the same bounds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import gzip_accepted
from waitress import trigger
from waitress.server import create_server

log = logging.getLogger(__name__)

THREADS = 4  # requests served at once; the rest wait in waitress's queue
CONNECTION_LIMIT = 64  # open sockets at once, waitress's own two among them; more wait in the backlog
CHANNEL_TIMEOUT_S = 30  # a connection that sends nothing for this long is closed
STOP_WAIT_S = 30  # how long `stop` waits for the loop to close its sockets
REUSE_FACTOR = 4  # a /metrics rendering is served again for this many times as long as it took
RENDER_KINDS = 8  # renderings kept, by the format and compression asked for

# A readiness check: its name and a function saying None when fine, else what is wrong.
Check = Callable[[], str | None]


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class ProbeServer:
    """The metrics endpoint and the health probes; `stop()` closes the port."""

    def __init__(
        self,
        registry: CollectorRegistry,
        checks: Mapping[str, Check],
        host: str,
        port: int,
        console: WSGIApp | None = None,
    ) -> None:
        self._metrics = SharedRendering(make_wsgi_app(registry))
        self._checks = checks
        self._console = console  # every other path, when the console shares this server
        self._server: Any = create_server(
            self._app,
            host=host,
            port=port,
            threads=THREADS,
            connection_limit=CONNECTION_LIMIT,
            channel_timeout=CHANNEL_TIMEOUT_S,
            cleanup_interval=CHANNEL_TIMEOUT_S,  # how often idle connections are looked for
            ident="compactor",
            clear_untrusted_proxy_headers=False,  # the console's ProxyFix decides whom to believe
        )
        listening = getattr(self._server, "effective_port", None)  # several sockets: the first's
        self.port: int = listening if listening is not None else self._server.effective_listen[0][1]
        self._thread = threading.Thread(target=self._server.run, name="compactor-probes", daemon=True)

    def start(self) -> ProbeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close every socket from the server's own loop thread (closed from here, a socket the loop
        is waiting on in `select` fails it with EBADF), then end its worker threads. A loop that
        does not end within `STOP_WAIT_S` keeps its sockets: closing them from this thread while
        it still runs would close descriptors it is about to close too, or that the process has
        already handed to a new socket (it is a daemon thread; the process's exit ends it)."""
        self._server.task_dispatcher.shutdown(
            timeout=1
        )  # first: a request served after would wake a closed loop
        if not self._thread.ident:  # never started: nothing else touches its sockets
            self._server.close()
            return
        sockets = getattr(self._server, "_map", None) or getattr(self._server, "map", {})
        wake = next((c for c in list(sockets.values()) if isinstance(c, trigger.trigger)), None)
        if self._thread.is_alive() and wake is not None:
            wake.pull_trigger(lambda: [channel.close() for channel in list(sockets.values())])
        self._thread.join(STOP_WAIT_S)
        if self._thread.is_alive():
            log.warning("the probe server's loop did not end within %s s; its port stays open", STOP_WAIT_S)

    def _app(self, environ: dict[str, Any], respond: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            return _plain(respond, "200 OK", "ok")
        if path == "/ready":
            for name, check in self._checks.items():
                problem = check()
                if problem is not None:
                    return _plain(respond, "503 Service Unavailable", f"not ready: {name}: {problem}")
            return _plain(respond, "200 OK", "ready")
        if path == "/metrics":
            result: Iterable[bytes] = self._metrics(environ, respond)
            return result
        if self._console is not None:
            page: Iterable[bytes] = self._console(environ, respond)
            return page
        return _plain(respond, "404 Not Found", "try /metrics, /healthz or /ready")


def _plain(respond: Callable[..., Any], status: str, text: str) -> list[bytes]:
    body = (text + "\n").encode()
    respond(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
    return [body]


@dataclass(frozen=True)
class _Rendering:
    status: str
    headers: list[tuple[str, str]]
    body: bytes
    fresh_until: float  # the clock's time after which it is rendered anew


class SharedRendering:
    """A WSGI app whose GET responses are shared: one rendering at a time (a request that arrives
    while one runs waits for it and is served it), each served again until `REUSE_FACTOR` times
    its own duration has passed, kept apart by the format (Accept) and compression asked for.
    Anything else (a query string such as `name[]`, another method) goes to the app itself."""

    def __init__(self, app: WSGIApp, clock: Callable[[], float] = time.monotonic) -> None:
        self._app = app
        self._clock = clock
        self._lock = threading.Lock()
        self._renderings: dict[tuple[str, bool], _Rendering] = {}

    def __call__(self, environ: dict[str, Any], respond: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "GET" or environ.get("QUERY_STRING"):
            return self._app(environ, respond)
        kind = (environ.get("HTTP_ACCEPT", ""), gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")))
        with self._lock:
            rendering = self._renderings.get(kind)
            if rendering is None or self._clock() > rendering.fresh_until:
                rendering = self._render(environ)
                if len(self._renderings) >= RENDER_KINDS and kind not in self._renderings:
                    self._renderings.clear()  # a client inventing Accept headers keeps no memory
                self._renderings[kind] = rendering
        respond(rendering.status, list(rendering.headers))
        return [rendering.body]

    def _render(self, environ: dict[str, Any]) -> _Rendering:
        began = self._clock()
        answer: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            answer.update(status=status, headers=headers)

        body = b"".join(self._app(environ, capture))
        ended = self._clock()
        return _Rendering(answer["status"], answer["headers"], body, ended + REUSE_FACTOR * (ended - began))
