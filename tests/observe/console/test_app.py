"""The console's pages and controls through Flask's test client, over a source of plain values:
every name and reason escaped (nothing a table or a dead letter holds can run as script), no
secret on any page, read-only without a token, controls only for a signed-in operator with the
session's CSRF token, POST only, and each control publishing the CLI's control event."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest
from flask.testing import FlaskClient

from compactor.codec.events import default_codec
from compactor.config.kafka import KafkaConfig
from compactor.domain.events import CompactionRequested
from compactor.domain.segments import Segment, TimeRange
from compactor.kafka.settings import KafkaSettings
from compactor.observe.console.app import console_app
from compactor.observe.console.controls import Controls
from compactor.observe.console.guard import FREE_TRIES, ConsoleGuard, allowed_hosts
from compactor.observe.console.snapshot import (
    DeadLetterRow,
    MergeRow,
    PlanRow,
    ShardRow,
    TableDetail,
    TableRow,
    Totals,
    Warehouse,
)
from compactor.observe.pictures.timeline import layout

NOW = datetime(2024, 6, 1, tzinfo=UTC)
EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>'
SECRET = "sasl-p4ssw0rd-never-shown"
TOKEN = "operator-token-123"
PLAN = "0123456789abcdef01234567"


def row(table: str, score: int = 80, merging: bool = True) -> TableRow:
    return TableRow(
        table, f"awaiting 2 segments {EVIL}", "awaiting", score, 4, 400, 2, 200, "stuck", NOW, merging
    )


@dataclass
class Source:
    rows: list[TableRow] = field(default_factory=lambda: [row("t"), row(f"evil{EVIL}", 10)])

    def warehouse(self) -> Warehouse:
        totals = Totals(len(self.rows), 8, 800, 4, 400, 1.5, 3.0)
        return Warehouse(tuple(self.rows), totals, NOW, (f"note {EVIL}",))

    def knows(self, name: str) -> bool:
        return any(r.table == name for r in self.rows)

    def table(self, name: str) -> TableDetail | None:
        found = next((r for r in self.rows if r.table == name), None)
        if found is None:
            return None
        seg = Segment("s1", name, TimeRange(NOW - timedelta(days=1), NOW), NOW, 10, bytes=100)
        return TableDetail(
            row=found,
            timeline=layout(name, [seg], [], NOW, timedelta(hours=6)),
            running=frozenset({seg.id}),
            running_plans=(f"plan{EVIL}",),
            plans=(PlanRow("p1", "minor", (seg.id,), 100, f"because {EVIL}"),),
            merges=(
                MergeRow(name, "p0", "minor", "FAILED", (seg.id,), ("o",), 1, 2, 3, None, None, NOW, EVIL),
            ),
            config={"rules": [{"rule": "minor"}], "note": EVIL},
            overrides=frozenset({"rules"}),
            dead_letters=(DeadLetterRow("0/1", name, "bad_event", EVIL, "segments/0/7", b"\x00<b>"),),
            failures=(f"failed {EVIL}",),
        )

    def shards(self) -> list[ShardRow] | None:
        return [ShardRow(0, f"job {EVIL}", ("q0",), 5, 2)]


class Tail:
    def merges(self, table: str | None = None) -> list[MergeRow]:
        return []

    def dead_letters(self, table: str | None = None) -> list[DeadLetterRow]:
        return [DeadLetterRow("0/1", f"t{EVIL}", f"reason {EVIL}", EVIL, "segments/0/7", b"\x00<script>")]


class Producer:
    sent: ClassVar[list[Any]] = []

    def __init__(self, kafka: KafkaSettings) -> None:
        pass

    def send_all(self, messages: list[Any]) -> None:
        Producer.sent.extend(messages)

    def close(self) -> None:
        pass


KAFKA = KafkaSettings(
    "127.0.0.1:1",
    "segments",
    "results",
    "dead",
    KafkaConfig(
        security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u", sasl_password=SECRET
    ),
)


def client(
    token: str | None = TOKEN, guard: ConsoleGuard | None = None, clock: Callable[[], float] = time.time
) -> FlaskClient:
    Producer.sent = []
    controls = Controls(KAFKA, default_codec(), producer=Producer)  # type: ignore[arg-type]
    app = console_app(Source(), Tail(), controls, token, guard=guard, clock=clock)  # type: ignore[arg-type]
    app.testing = True
    return app.test_client()


PAGES = [
    "/",
    "/fragments/tables",
    "/tables/t",
    "/fragments/tables/t",
    "/shards",
    "/dead-letters",
    "/dead-letters/0/1",
    "/login",
]


@pytest.mark.parametrize("path", PAGES)
def test_no_page_lets_a_name_or_reason_run_as_markup_or_shows_a_secret(path: str) -> None:
    page = client().get(path)
    assert page.status_code == 200, page.text
    assert "<script>alert" not in page.text and "<img src=x" not in page.text
    assert SECRET not in page.text
    assert (
        "Content-Security-Policy" in page.headers
        and "script-src 'self'" in page.headers["Content-Security-Policy"]
    )
    scripts = re.findall(r"<script[^>]*>", page.text)
    assert all("src=" in s for s in scripts), "no inline script: the CSP would refuse it anyway"


def test_escaped_values_are_still_shown_as_text() -> None:
    page = client().get("/tables/t").text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page
    evil = client().get("/?q=evil").text
    assert "evil&lt;script&gt;" in evil and 'href="/tables/evil%3Cscript%3E' in evil


def test_a_console_without_a_token_is_read_only() -> None:
    web = client(token=None)
    page = web.get("/tables/t").text
    assert "read-only" in page and "<form" not in page.replace('class="filter"', "")
    assert web.post("/tables/t/disable", data={"csrf": "x"}).status_code == 403
    assert web.post("/login", data={"token": "anything"}).status_code == 200  # says it is read-only
    assert Producer.sent == []


def test_controls_need_the_token_then_the_sessions_csrf_token_and_post() -> None:
    web = client()
    assert "disable merging" not in web.get("/tables/t").text, "no control before signing in"
    assert web.post("/tables/t/disable").status_code == 403
    assert web.post("/login", data={"token": "wrong"}).status_code == 403
    assert web.post("/login", data={"token": TOKEN}).status_code == 303
    page = web.get("/tables/t").text
    assert "disable merging" in page
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    assert web.post("/tables/t/disable", data={"csrf": "not-it"}).status_code == 403
    assert web.get("/tables/t/disable").status_code == 405, "controls are POST only"
    assert Producer.sent == []
    done = web.post("/tables/t/disable", data={"csrf": csrf})
    assert done.status_code == 303 and "/tables/t?sent=" in done.headers["Location"]
    ((topic, key, value, _),) = Producer.sent
    event = default_codec().decode_input(value)
    assert (topic, key) == ("segments", "t")
    assert isinstance(event, CompactionRequested) and (event.table, event.merging) == ("t", False)


def test_a_request_and_a_cancel_publish_what_the_cli_publishes() -> None:
    web = client()
    web.post("/login", data={"token": TOKEN})
    csrf = re.search(r'name="csrf" value="([^"]+)"', web.get("/tables/t").text).group(1)  # type: ignore[union-attr]
    web.post("/tables/t/request", data={"csrf": csrf, "rule": "minor"})
    web.post("/tables/t/cancel", data={"csrf": csrf, "plan_id": PLAN})
    refused = web.post("/tables/t/cancel", data={"csrf": csrf, "plan_id": "p9"})
    assert refused.status_code == 400 and "plan_id: plan id &#39;p9&#39; is invalid" in refused.text
    assert web.post("/tables/nope/disable", data={"csrf": csrf}).status_code == 404
    events = [default_codec().decode_input(m[2]) for m in Producer.sent]
    assert [(e.rule, e.cancel_plan) for e in events] == [("minor", None), (None, PLAN)]  # type: ignore[union-attr]


def test_the_warehouse_page_sorts_filters_and_pages() -> None:
    source = Source([row(f"t{i:03d}", score=i) for i in range(120)])
    app = console_app(source)  # type: ignore[arg-type]
    web = app.test_client()
    first = web.get("/?sort=health").text
    names = re.findall(r'<tr data-table="([^"]+)"', first)
    assert names == [f"t{i:03d}" for i in range(50)] and "page 1 of 3" in first
    last = web.get("/?sort=table&desc=1&page=3").text
    assert re.findall(r'<tr data-table="([^"]+)"', last) == [f"t{i:03d}" for i in range(19, -1, -1)]
    assert re.findall(r'<tr data-table="([^"]+)"', web.get("/?q=t11").text) == [f"t11{i}" for i in range(10)]
    least = web.get("/").text.split('id="least-healthy"')[1].split("</table>")[0]
    assert re.findall(r">(t\d+)</a>", least) == [f"t{i:03d}" for i in range(10)]


def test_a_host_not_among_the_consoles_names_is_refused() -> None:
    """DNS rebinding: a page of evil.example whose name resolves to the console's address."""
    web = client(guard=ConsoleGuard(hosts=allowed_hosts("127.0.0.1", ["compactor.internal"])))
    assert web.get("/", headers={"Host": "127.0.0.1:8080"}).status_code == 200
    assert web.get("/", headers={"Host": "localhost"}).status_code == 200
    assert web.get("/tables/t", headers={"Host": "Compactor.Internal:443"}).status_code == 200
    refused = web.get("/dead-letters/0/1", headers={"Host": "evil.example:8080"})
    assert refused.status_code == 421 and "evil.example" in refused.text and "00 01" not in refused.text
    login = web.post("/login", data={"token": TOKEN}, headers={"Host": "evil.example"})
    assert login.status_code == 421 and "Set-Cookie" not in login.headers


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def signed_in(web: FlaskClient) -> bool:
    return "disable merging" in web.get("/tables/t").text


def test_a_session_ends_when_idle_and_when_old_and_a_pages_refresh_is_no_visit() -> None:
    clock = Clock()
    guard = ConsoleGuard(idle=timedelta(minutes=30), longest=timedelta(hours=12))
    web = client(guard=guard, clock=clock)
    assert web.post("/login", data={"token": TOKEN}).status_code == 303 and signed_in(web)
    for _ in range(3):  # a tab left open: its fragments refresh every few seconds
        clock.now += 20 * 60
        web.get("/fragments/tables/t")
    assert not signed_in(web), "idle for 60 minutes although the page refreshed itself"

    web.post("/login", data={"token": TOKEN})
    for _ in range(24 * 2):  # busy all day: a visit every 25 minutes
        clock.now += 25 * 60
        if not signed_in(web):
            break
    assert clock.now - 1_000_000.0 > 12 * 3600 - 25 * 60, "held until its longest"
    assert not signed_in(web)


def test_wrong_tokens_are_throttled_per_client() -> None:
    clock = Clock()
    web = client(clock=clock)
    other = {"REMOTE_ADDR": "10.0.0.9"}
    for _ in range(FREE_TRIES):
        assert web.post("/login", data={"token": "wrong"}).status_code == 403
    waited = web.post("/login", data={"token": TOKEN})
    assert waited.status_code == 429 and waited.headers["Retry-After"] == "1", "even the right token waits"
    assert web.post("/login", data={"token": TOKEN}, environ_base=other).status_code == 303, "per client"
    clock.now += 1
    assert web.post("/login", data={"token": "wrong"}).status_code == 403
    assert web.post("/login", data={"token": "wrong"}).headers["Retry-After"] == "2", "each wait doubles"
    clock.now += 2
    assert web.post("/login", data={"token": TOKEN}).status_code == 303
    assert web.post("/login", data={"token": "wrong"}).status_code == 403, "a right token clears the count"


def test_the_session_cookie_is_secure_behind_a_tls_proxy_whose_headers_are_believed() -> None:
    plain = client().post("/login", data={"token": TOKEN})
    assert "Secure" not in plain.headers["Set-Cookie"] and "HttpOnly" in plain.headers["Set-Cookie"]
    guard = ConsoleGuard(hosts=allowed_hosts("127.0.0.1", ["compactor.example.com"]), behind_tls_proxy=True)
    web = client(guard=guard)
    proxied = {
        "X-Forwarded-Proto": "https",
        "X-Forwarded-Host": "compactor.example.com",
        "X-Forwarded-For": "10.1.1.1",
    }
    answer = web.post("/login", data={"token": TOKEN}, headers=proxied)
    assert answer.status_code == 303 and "; Secure" in answer.headers["Set-Cookie"]
    for _ in range(FREE_TRIES + 1):  # the client's address as the proxy gives it is the one throttled
        web.post("/login", data={"token": "wrong"}, headers={**proxied, "X-Forwarded-For": "10.6.6.6"})
    assert web.post("/login", data={"token": TOKEN}, headers=proxied).status_code == 303
    assert web.get("/", headers={**proxied, "X-Forwarded-Host": "evil.example"}).status_code == 421
