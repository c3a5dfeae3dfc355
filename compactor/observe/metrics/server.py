"""`/metrics`, `/healthz` and `/ready` on one port, in a daemon thread beside the job; and the
operator's console on every other path of that port when it is given one.

prometheus_client's WSGI app answers `/metrics`; the two probes answer
`200 ok` or `503` with the first check that failed, so a Kubernetes probe or an
operator's curl says why the job is not ready.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

# A readiness check: its name and a function saying None when fine, else what is wrong.
Check = Callable[[], str | None]


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # scrapes every 15 s are not news
        pass


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
        self._metrics = make_wsgi_app(registry)
        self._checks = checks
        self._console = console  # every other path, when the console shares this server
        self._server = make_server(host, port, self._app, _ThreadingServer, handler_class=_QuietHandler)
        self.port = self._server.server_port
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="compactor-probes", daemon=True
        )

    def start(self) -> ProbeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

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
