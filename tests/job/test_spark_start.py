"""Spark started beside the lease (`compactor/job/run.py`'s `SparkStart`): the session is built on a
thread of its own, a refused job never waits for it, an error in building it reaches the job, and
the warm-up runs after the session is handed over, not before."""

from __future__ import annotations

import threading
import time

import pytest

from compactor.job.run import SparkStart


def test_the_build_starts_at_once_and_the_session_is_handed_over_when_built() -> None:
    release = threading.Event()
    session = object()
    began = time.monotonic()
    start = SparkStart(lambda: release.wait(10) and session, then=lambda s: None)
    assert time.monotonic() - began < 1, "made without waiting for the build: the lease goes on beside it"
    release.set()
    assert start.session() is session
    assert start.session() is session, "asked again: the same session"


def test_an_error_building_the_session_is_raised_where_the_session_is_asked_for() -> None:
    def build() -> object:
        raise RuntimeError("the Kafka connector's jar is not on the driver's class path")

    warmed: list[object] = []
    start = SparkStart(build, then=warmed.append)
    with pytest.raises(RuntimeError, match="Kafka connector's jar"):
        start.session()
    assert warmed == [], "nothing to warm up"


def test_the_warm_up_follows_the_handover_and_never_holds_it_up() -> None:
    session, warming, release = object(), threading.Event(), threading.Event()

    def warm(s: object) -> None:
        assert s is session
        warming.set()
        release.wait(10)  # a slow warm-up

    start = SparkStart(lambda: session, then=warm)
    began = time.monotonic()
    assert start.session() is session
    assert warming.wait(5), "the warm-up ran on the session"
    assert time.monotonic() - began < 5, "the session came before the warm-up ended"
    release.set()


def test_a_refused_job_does_not_wait_for_its_spark() -> None:
    never = threading.Event()
    began = time.monotonic()
    start = SparkStart(lambda: never.wait(30), then=lambda s: None)  # the lease is refused: nobody asks
    assert time.monotonic() - began < 1
    assert start.thread.is_alive() and start.thread.daemon, (
        "a daemon thread: the process may exit while it builds"
    )
    never.set()
