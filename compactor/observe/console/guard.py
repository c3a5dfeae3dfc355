"""Who may reach the console, and for how long a sign-in holds: the console's guard.

- **Host names.** A page on another site can make a browser send requests to the console
  through a DNS name of its own that resolves to the console's address (DNS rebinding): the
  browser then treats the answers as that site's and lets its script read them. The console
  answers only requests whose `Host` is one of its own names (`allowed_hosts`), and 421 to the
  rest. /metrics, /healthz and /ready stay open to any `Host`: scrapers and probes come by
  address, and those answers hold no table data beyond its names.
- **Sessions** end after `SESSION_IDLE` without a request and `SESSION_MAX` after the sign-in,
  whatever the browser does with its cookie (both times live in the signed session itself).
- **Wrong tokens** are throttled per client (`SignInThrottle`): a few tries are free, then each
  further one waits twice as long as the last, up to `MAX_WAIT_S`.
"""

from __future__ import annotations

import ipaddress
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta

SESSION_IDLE = timedelta(minutes=30)
SESSION_MAX = timedelta(hours=12)
FREE_TRIES = 5  # wrong tokens a client may give before it waits
MAX_WAIT_S = 300.0
CLIENTS_KEPT = 10_000  # clients whose failures are remembered; the least recent are forgotten
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARDS = ("0.0.0.0", "::", "")


def allowed_hosts(bind_host: str, named: Iterable[str] = ()) -> frozenset[str]:
    """The host names the console answers: the loopback names, the address it binds (unless a
    wildcard), and those the operator named (`--console-allowed-host`: the names a browser or a
    proxy uses to reach it)."""
    hosts = {*LOCAL_NAMES, *(n.strip().lower() for n in named if n.strip())}
    if bind_host not in WILDCARDS:
        hosts.add(bind_host.lower())
    return frozenset(hosts)


def host_name(header: str) -> str:
    """The name in a `Host` header, without its port: `[::1]:8080` -> `::1`, `a.b:80` -> `a.b`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    name, _, port = header.rpartition(":")
    if name and port.isdigit():
        return name
    try:  # a bare IPv6 address holds colons of its own
        return str(ipaddress.IPv6Address(header))
    except ValueError:
        return header


@dataclass(frozen=True)
class ConsoleGuard:
    """The console's exposure: the names it answers, and whether a TLS proxy fronts it (the
    session cookie is then `Secure`, and the proxy's `X-Forwarded-*` headers are believed)."""

    hosts: frozenset[str] = frozenset(LOCAL_NAMES)
    behind_tls_proxy: bool = False
    idle: timedelta = SESSION_IDLE
    longest: timedelta = SESSION_MAX


@dataclass
class SignInThrottle:
    """Wrong tokens per client: after `FREE_TRIES`, each try waits 1, 2, 4, ... seconds after the
    last wrong one (at most `MAX_WAIT_S`); a right token clears the client's count."""

    free: int = FREE_TRIES
    longest: float = MAX_WAIT_S
    _failures: OrderedDict[str, tuple[int, float]] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the server's threads share it

    def wait(self, client: str, now: float) -> float:
        """Seconds `client` must wait before its next try (0: it may try now)."""
        with self._lock:
            count, last = self._failures.get(client, (0, 0.0))
        if count < self.free:
            return 0.0
        return max(0.0, last + min(2.0 ** (count - self.free), self.longest) - now)

    def failed(self, client: str, now: float) -> None:
        with self._lock:
            count, _ = self._failures.pop(client, (0, 0.0))
            self._failures[client] = (count + 1, now)
            while len(self._failures) > CLIENTS_KEPT:
                self._failures.popitem(last=False)

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)
