"""`/metrics`, `/healthz` and `/ready` on one port, in a daemon thread beside the job; and the
operator's console on every other path of that port when it is given one.

prometheus_client's WSGI app answers `/metrics`; the two probes answer
`200 ok` or `503` with the first check that failed, so a Kubernetes probe or an
operator's curl says why the job is not ready.

The server is waitress, inside the job's driver: a fixed pool of `THREADS` workers (a flood of
requests queues, it never starts a thread per connection as wsgiref's threading server did), at
most `CONNECTION_LIMIT` open connections, and a connection idle for `CHANNEL_TIMEOUT_S` closed,
so a client that opens connections and sends nothing (slowloris) holds no worker. Waitress is
pure Python, kept up by the Pylons project, and serves any WSGI app (Flask's and
prometheus_client's alike); cheroot would do too, with more to configure for the same bounds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, make_wsgi_app
from waitress import trigger
from waitress.server import create_server

log = logging.getLogger(__name__)

THREADS = 4  # requests served at once; the rest wait in waitress's queue
CONNECTION_LIMIT = 64  # open sockets at once, waitress's own two among them; more wait in the backlog
CHANNEL_TIMEOUT_S = 30  # a connection that sends nothing for this long is closed
STOP_WAIT_S = 30  # how long `stop` waits for the loop to close its sockets

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
        self._metrics = make_wsgi_app(registry)
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
