"""The operator's console, driven in Debian's Chromium (Playwright) against a real job, broker and
Delta tables: a week's merge appears on the table page without a reload; a merge requested from
the page runs and its result shows; a table disabled from the page stops being attempted; a
read-only console offers no control; names and reasons holding markup never run; no page shows
a secret. Each test saves a screenshot when it fails; with COMPACTOR_DOC_SCREENSHOTS=1 the
pages the docs show are saved into docs/operating/img/."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from playwright.sync_api import Browser, Page, expect, sync_playwright
from prometheus_client import CollectorRegistry

from compactor.client.loader import load_segment, sample_rows
from compactor.config.loading import load_config
from compactor.job.wiring import build_handler
from compactor.kafka.producer import EventProducer
from compactor.kafka.settings import KafkaSettings
from compactor.observe.console.serve import Console, job_console
from compactor.observe.metrics.server import ProbeServer
from tests.helpers.streaming import JobRunner, make_kafka

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "operating" / "img"
SECRET = "rack-s3cr3t-never-on-a-page"
TOKEN = "a-console-token-for-tests"
WEEK = datetime(2024, 1, 1, tzinfo=UTC)  # a Monday
XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=1</script>'
CONFIG: dict[str, Any] = {
    "defaults": {"rules": [{"rule": "auto_merge", "levels": ["week"]}]},
    "tables": {"orders": {"rules": [{"rule": "minor", "level_thresholds": [3, 0], "trigger": "manual"}]}},
    "kafka": {"librdkafka": {"client.rack": SECRET}},
}


class BackgroundJob:
    """The real job's query run again and again (availableNow) while the browser watches."""

    def __init__(self, runner: JobRunner) -> None:
        self.runner = runner
        self.stop = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                self.runner.run_once()
            except BaseException as exc:  # reported by the test
                self.failure = exc
                return
            self.stop.wait(0.5)

    def __enter__(self) -> BackgroundJob:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=300)
        assert self.failure is None, f"the job failed: {self.failure}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"{CHROMIUM} is missing: `make test` installs Debian's chromium (apt-get install chromium)"
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Page]:
    opened = browser.new_page(viewport={"width": 1280, "height": 900})
    dialogs: list[str] = []
    opened.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    yield opened
    if getattr(request.node, "rep_call_failed", False):
        shot = tmp_path / f"{request.node.name}.png"
        opened.screenshot(path=str(shot), full_page=True)
        print(f"screenshot of the failed page: {shot}")
    opened.close()
    assert dialogs == [], f"a page opened a dialog (script ran): {dialogs}"


def serve(console: Console) -> str:
    server = ProbeServer(CollectorRegistry(), {}, "127.0.0.1", 0, console=console.app).start()
    return f"http://127.0.0.1:{server.port}"


def days(spark: Any, warehouse: Path, kafka: KafkaSettings, table: str, first: int, count: int) -> None:
    producer = EventProducer(kafka)
    try:
        for i in range(first, first + count):
            start = WEEK + timedelta(days=i)
            rows = sample_rows(spark, start, start + timedelta(days=1), 20, seed=i)
            load_segment(
                spark, warehouse, kafka, producer, table, rows, start, start + timedelta(days=1),
                segment_id=f"{table}{start:%Y%m%d}",
            )  # fmt: skip
    finally:
        producer.close()


def no_secret(page: Page) -> None:
    assert SECRET not in page.content(), f"{page.url} shows a secret"


def screenshot_for_docs(page: Page, name: str) -> None:
    if os.environ.get("COMPACTOR_DOC_SCREENSHOTS") == "1":
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(DOCS_IMG / f"console-{name}.png"), full_page=False)


def test_an_operator_watches_a_merge_requests_one_and_disables_a_table(
    spark: Any,
    kafka_bootstrap: str,
    unique: Callable[[str], str],
    warehouse: Path,
    tmp_path: Path,
    page: Page,
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    config = load_config(CONFIG)
    kafka = KafkaSettings(
        kafka.bootstrap_servers,
        kafka.segments_topic,
        kafka.results_topic,
        kafka.dead_letter_topic,
        config.kafka,
    )
    handler = build_handler(spark, config, warehouse, kafka)
    runner = JobRunner(spark, handler, kafka, tmp_path / "checkpoint")
    days(spark, warehouse, kafka, "sales", 0, 6)
    days(spark, warehouse, kafka, "orders", 0, 3)
    runner.run_until_quiet()
    console = job_console(config, kafka, lambda: [handler], lambda: None, TOKEN)
    base = serve(console)
    try:
        page.goto(f"{base}/tables/sales")
        expect(page.locator("svg.timeline g.segment")).to_have_count(6)
        expect(page.locator("#merges")).to_have_text("none yet")
        page.evaluate("window.__still_this_page = true")
        with BackgroundJob(runner):
            days(spark, warehouse, kafka, "sales", 6, 1)  # the week is complete: the job merges it
            expect(page.locator("#merges tr[data-plan]")).to_have_count(1, timeout=180_000)
            expect(page.locator("#merges tr[data-plan] td").nth(2)).to_have_text("SUCCEEDED")
            expect(page.locator("svg.timeline g.segment")).to_have_count(1, timeout=30_000)
            assert page.evaluate("window.__still_this_page") is True, "no reload: the page updated itself"
            no_secret(page)

            page.goto(f"{base}/login")
            page.fill("#token", TOKEN)
            page.click("#sign-in-button")
            page.goto(f"{base}/tables/orders")
            expect(page.locator("#plans")).to_have_text("nothing is ready to merge")  # its rule is manual
            screenshot_for_docs(page, "table")
            page.select_option("select[name=rule]", "minor")
            page.click("#request-merge")
            expect(page.locator("#request-outcome")).to_contain_text("(minor): SUCCEEDED", timeout=180_000)
            expect(page.locator("#merges tr[data-plan]")).to_have_count(1, timeout=30_000)
            no_secret(page)

            page.goto(f"{base}/tables/sales")
            page.click("#disable")
            expect(page.locator("#request-outcome")).to_contain_text(
                "taken: merging on sales is off", timeout=180_000
            )
            expect(page.locator("#merging")).to_have_text("off", timeout=30_000)
            before = handler.stats
            days(spark, warehouse, kafka, "sales", 7, 7)  # a second full week: not attempted
            for _ in range(600):
                if handler.stats.events >= before.events + 7:
                    break
                threading.Event().wait(0.5)
        after = handler.stats
        assert after.disabled_attempts >= before.disabled_attempts + 7, "each load found merging off"
        assert after.merges == before.merges, "no merge of the disabled table"
        page.goto(f"{base}/")
        expect(page.locator('tr[data-table="sales"] td').nth(1)).to_have_text("disabled")
        screenshot_for_docs(page, "warehouse")
        no_secret(page)
        page.goto(f"{base}/dead-letters")
        no_secret(page)
        page.goto(f"{base}/shards")
        no_secret(page)
    finally:
        console.close()
        handler.close()


def test_a_read_only_console_offers_no_control_and_no_markup_runs(
    spark: Any,
    kafka_bootstrap: str,
    unique: Callable[[str], str],
    warehouse: Path,
    tmp_path: Path,
    page: Page,
) -> None:
    kafka = make_kafka(kafka_bootstrap, unique)
    config = load_config(CONFIG)
    handler = build_handler(spark, config, warehouse, kafka)
    days(spark, warehouse, kafka, "sales", 0, 2)
    raw = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    raw.produce(kafka.segments_topic, key=XSS.encode(), value=f"not an event {XSS}".encode())
    raw.flush(10)
    JobRunner(spark, handler, kafka, tmp_path / "checkpoint").run_until_quiet()
    console = job_console(config, kafka, lambda: [handler], lambda: None, None)
    base = serve(console)
    try:
        page.goto(f"{base}/tables/sales")
        expect(page.locator("#read-only")).to_have_text("read-only")
        assert page.locator("form[method=post]").count() == 0, "no control on a read-only console"
        assert page.locator("#controls, #disable, #request-merge, .cancel").count() == 0
        refused = page.request.post(f"{base}/tables/sales/disable", form={"csrf": "x"})
        assert refused.status == 403 and "read-only" in refused.text()

        page.goto(f"{base}/dead-letters")
        expect(page.locator("#dead-letters tbody tr")).to_have_count(1, timeout=60_000)
        cells = page.locator("#dead-letters tbody tr td")
        expect(cells.nth(1)).to_have_text(XSS)  # the key shown as text, not markup
        page.locator("#dead-letters button").click()
        expect(page.locator("pre.hex")).to_contain_text("not an event <im", timeout=10_000)
        assert page.evaluate("window.__xss") is None, "no script of the dead letter ran"
        assert page.locator("#dead-letters img").count() == 0
    finally:
        console.close()
        handler.close()


def test_a_rebound_host_name_and_wrong_tokens_are_turned_away_in_the_browser(
    browser: Browser, tmp_path: Path
) -> None:
    """DNS rebinding as a browser meets it: a name of another site resolving to the console's
    address (Chromium's resolver mapped) is refused with 421, so its page never reads the
    console; a sign-in form sent with wrong tokens gets a wait after a few. The console's clock
    stands still, so the wait does not run out while a slow machine fills the form again."""
    from compactor.observe.console.app import console_app
    from compactor.observe.console.guard import FREE_TRIES, ConsoleGuard, allowed_hosts
    from compactor.observe.console.sources import JobSource
    from tests.helpers.harness import Harness

    harness = Harness(tmp_path)
    harness.store.create("sales")
    rules = {"defaults": {"rules": [{"rule": "minor", "level_thresholds": [3, 0]}]}}
    handler = harness.handler(rules)
    handler.process(harness.loaded(harness.day(0, sid="s0", table="sales")))
    source = JobSource(lambda: [handler], load_config(rules))
    guard = ConsoleGuard(hosts=allowed_hosts("127.0.0.1", ["compactor.internal"]))
    server = ProbeServer(
        CollectorRegistry(),
        {},
        "127.0.0.1",
        0,
        console=console_app(source, token=TOKEN, guard=guard, clock=lambda: 1e9),
    )
    server.start()
    port = server.port
    resolve = "MAP rebind.example 127.0.0.1, MAP compactor.internal 127.0.0.1"
    mapped = browser.browser_type.launch(
        executable_path=CHROMIUM, headless=True, args=["--no-sandbox", f"--host-resolver-rules={resolve}"]
    )
    try:
        page = mapped.new_page()
        page.goto(f"http://compactor.internal:{port}/tables/sales")
        expect(page.locator("#table-name")).to_have_text("sales")

        answer = page.goto(f"http://rebind.example:{port}/tables/sales")
        assert answer is not None and answer.status == 421
        assert page.locator("#table-name").count() == 0, "no page of the console under another name"

        page.goto(f"http://127.0.0.1:{port}/login")
        statuses = []
        for _ in range(FREE_TRIES + 1):
            page.fill("#token", "a wrong token")
            with page.expect_response(
                lambda r: r.url.endswith("/login") and r.request.method == "POST"
            ) as sent:
                page.click("#sign-in-button")
            statuses.append(sent.value.status)
            page.goto(f"http://127.0.0.1:{port}/login")
        assert statuses == [403] * FREE_TRIES + [429], statuses
    finally:
        mapped.close()
        server.stop()
        handler.close()
