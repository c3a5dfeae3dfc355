"""The console's web application (Flask, server-rendered, htmx for the parts that refresh).

Safe by default: read-only unless a token is configured; with one, an operator logs in with it
(compared in constant time, wrong tries throttled per client) and gets a session, ended when idle
or old, whose controls are POST forms carrying a per-session CSRF token. Requests for a `Host`
that is not one of the console's own names are refused (`guard.py`). Templates escape every
value (Jinja's autoescape); a strict Content Security Policy allows the console's own script and
style only. No page shows a secret: table configs hold none, and the Kafka settings are never
rendered.
"""

from __future__ import annotations

import hmac
import os
import secrets
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from flask import Flask, Response, abort, redirect, render_template, request, session, url_for
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.wrappers import Response as BaseResponse

from compactor.domain.plans import validate_plan_id
from compactor.errors import CompactorError
from compactor.observe.console.controls import Controls, Sent
from compactor.observe.console.guard import ConsoleGuard, SignInThrottle, host_name
from compactor.observe.console.snapshot import SORT_KEYS
from compactor.observe.console.sources import ConsoleSource
from compactor.observe.console.timeline_svg import timeline_svg
from compactor.observe.console.topic_tail import TopicTail

HERE = Path(__file__).parent
CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'"
NO_BROKER = "this page needs the Kafka broker: start the console with --bootstrap-servers"


def console_app(
    source: ConsoleSource,
    tail: TopicTail | None = None,
    controls: Controls | None = None,
    token: str | None = None,
    secret_key: bytes | None = None,
    guard: ConsoleGuard | None = None,
    clock: Callable[[], float] = time.time,
) -> Flask:
    """The console over `source`; `tail` follows the results and dead letters, `controls`
    publishes control events (both None without a broker); `token`: None for a read-only
    console; `guard`: the names it answers and its sessions' limits."""
    guard = guard or ConsoleGuard()
    app = Flask(__name__, template_folder=str(HERE / "templates"), static_folder=str(HERE / "static"))
    app.config.update(
        SECRET_KEY=secret_key or os.urandom(32),
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        SESSION_COOKIE_SECURE=guard.behind_tls_proxy,
        MAX_CONTENT_LENGTH=64 * 1024,
    )
    if guard.behind_tls_proxy:  # the client's address, scheme and host as the proxy saw them
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=1, x_proto=1, x_host=1)  # type: ignore[method-assign]
    app.jinja_env.filters.update(size=_size, when=_when, pct=lambda v: f"{v:.0%}")

    def authorised() -> bool:
        return token is not None and session.get("operator") is True

    @app.before_request
    def guarded() -> None:
        host = host_name(request.host)
        if host not in guard.hosts:
            abort(421, f"this console does not answer for the host {host!r}")
        if session.get("operator") is True:
            now = clock()
            began, seen = float(session.get("since", 0)), float(session.get("seen", 0))
            if now - seen > guard.idle.total_seconds() or now - began > guard.longest.total_seconds():
                session.clear()  # signed out: idle, or signed in too long ago
            elif not request.path.startswith("/fragments/"):  # a page's own refresh is not a visit
                session["seen"] = now

    _add_pages(app, source, tail, controls)
    _add_operator(app, source, controls, token, authorised, clock)

    @app.context_processor
    def common() -> dict[str, Any]:
        return {
            "can_control": authorised() and controls is not None,
            "read_only": token is None,
            "csrf": session.get("csrf", ""),
            "has_broker": tail is not None,
        }

    @app.after_request
    def headers(response: Response) -> Response:
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers.setdefault("Cache-Control", "no-store")
        return response

    @app.errorhandler(400)
    @app.errorhandler(403)
    @app.errorhandler(404)
    @app.errorhandler(421)
    @app.errorhandler(429)
    @app.errorhandler(503)
    def problem(error: Any) -> tuple[str, int]:
        return render_template("problem.html", error=error), error.code

    return app


def _add_pages(app: Flask, source: ConsoleSource, tail: TopicTail | None, controls: Controls | None) -> None:
    """The pages anyone who reaches the console reads, and the fragments htmx refreshes."""

    @app.get("/")
    def warehouse() -> str:
        return render_template("warehouse.html", **_warehouse_page(source))

    @app.get("/fragments/tables")
    def table_rows() -> str:
        return render_template("_tables.html", **_warehouse_page(source))

    @app.get("/tables/<name>")
    def table(name: str) -> str:
        detail = source.table(name)
        if detail is None:
            abort(404, f"no table {name!r} in this warehouse")
        sent = controls.sent(request.args.get("sent", "")) if controls else None
        return render_template(
            "table.html", detail=detail, svg=timeline_svg(detail.timeline, detail.running), sent=sent
        )

    @app.get("/fragments/tables/<name>")
    def table_live(name: str) -> str:
        detail = source.table(name)
        if detail is None:
            abort(404, f"no table {name!r} in this warehouse")
        return render_template(
            "_table_live.html", detail=detail, svg=timeline_svg(detail.timeline, detail.running)
        )

    @app.get("/fragments/requests/<request_id>")
    def request_state(request_id: str) -> str:
        sent = controls.sent(request_id) if controls else None
        if sent is None:
            abort(404, "no such request from this console")
        row = next((r for r in source.warehouse().rows if r.table == sent.table), None)
        merges = tail.merges(sent.table) if tail else []
        outcome = controls.outcome(sent, row.merging if row else None, merges)  # type: ignore[union-attr]
        return render_template("_request.html", sent=sent, outcome=outcome)

    @app.get("/shards")
    def shards() -> str:
        return render_template("shards.html", shards=source.shards())

    @app.get("/dead-letters")
    def dead_letters() -> str:
        letters = tail.dead_letters() if tail else None
        return render_template(
            "dead_letters.html", letters=letters[:200] if letters else letters, no_broker=NO_BROKER
        )

    @app.get("/dead-letters/<partition>/<offset>")
    def dead_letter_bytes(partition: str, offset: str) -> str:
        where = f"{partition}/{offset}"
        found = next((d for d in (tail.dead_letters() if tail else []) if d.offset == where), None)
        if found is None:
            abort(404, f"no dead letter at {where} among the recent ones")
        return render_template("_hex.html", letter=found, hex=_hex(found.value))


def _add_operator(
    app: Flask,
    source: ConsoleSource,
    controls: Controls | None,
    token: str | None,
    authorised: Callable[[], bool],
    clock: Callable[[], float],
) -> None:
    """Signing in with the token, and the controls: POST forms checked for the session's CSRF
    token, each publishing one control event."""
    throttle = SignInThrottle()

    @app.route("/login", methods=["GET", "POST"])
    def login() -> str | BaseResponse | tuple[str, int, dict[str, str]]:
        if token is None:
            return render_template("login.html", problem="this console is read-only: it has no token")
        if request.method == "POST":
            client, now = request.remote_addr or "?", clock()
            wait = throttle.wait(client, now)
            if wait > 0:
                problem = f"too many wrong tokens from your address: try again in {wait:.0f} s"
                return render_template("login.html", problem=problem), 429, {"Retry-After": f"{wait:.0f}"}
            given = request.form.get("token", "")
            if hmac.compare_digest(given.encode(), token.encode()):
                throttle.succeeded(client)
                session.clear()
                session.update(operator=True, csrf=secrets.token_urlsafe(32), since=now, seen=now)
                return redirect(url_for("warehouse"), code=303)
            throttle.failed(client, now)
            return render_template("login.html", problem="that token is not this console's"), 403, {}
        return render_template("login.html", problem=None)

    @app.post("/logout")
    def logout() -> BaseResponse:
        _check_csrf()
        session.clear()
        return redirect(url_for("warehouse"), code=303)

    def _check_csrf() -> None:
        given = request.form.get("csrf", "")
        expected = session.get("csrf", "")
        if not expected or not hmac.compare_digest(given.encode(), str(expected).encode()):
            abort(403, "the form's CSRF token is missing or not this session's: reload the page")

    def control(name: str, act: Callable[[Controls], Sent]) -> BaseResponse:
        if token is None:
            abort(403, "this console is read-only: start it with --console-token to allow controls")
        if not authorised():
            abort(403, "sign in with the console's token first")
        _check_csrf()
        if controls is None:
            abort(503, NO_BROKER)
        if not source.knows(name):
            abort(404, f"no table {name!r} in this warehouse")
        sent = act(controls)
        return redirect(url_for("table", name=name, sent=sent.request_id), code=303)

    @app.post("/tables/<name>/disable")
    def disable(name: str) -> BaseResponse:
        return control(name, lambda c: c.disable(name))

    @app.post("/tables/<name>/enable")
    def enable(name: str) -> BaseResponse:
        return control(name, lambda c: c.enable(name))

    @app.post("/tables/<name>/request")
    def request_merge(name: str) -> BaseResponse:
        rule = request.form.get("rule") or None
        return control(name, lambda c: c.request(name, rule))

    @app.post("/tables/<name>/cancel")
    def cancel(name: str) -> BaseResponse:
        plan_id = request.form.get("plan_id", "")
        try:
            validate_plan_id(plan_id)
        except CompactorError as exc:
            abort(400, f"plan_id: {exc}")
        return control(name, lambda c: c.cancel(name, plan_id))


def _warehouse_page(source: ConsoleSource) -> dict[str, Any]:
    snapshot = source.warehouse()
    sort = request.args.get("sort", "health")
    page = snapshot.page(
        query=request.args.get("q", "")[:200],
        sort=sort if sort in SORT_KEYS else "health",
        descending=request.args.get("desc") == "1",
        page=_int(request.args.get("page"), 1),
    )
    return {
        "snapshot": snapshot,
        "page": page,
        "least": snapshot.least_healthy(),
        "sort_keys": list(SORT_KEYS),
    }


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text else default
    except ValueError:
        return default


def _size(value: int | None) -> str:
    if value is None:
        return "?"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value else "-"


def _hex(data: bytes, width: int = 16) -> str:
    lines = []
    for start in range(0, len(data), width):
        chunk = data[start : start + width]
        printable = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{start:08x}  {chunk.hex(' '):<{width * 3}} {printable}")
    return "\n".join(lines)
