"""The JVM session a Delta call runs under, on the job's own threads.

Delta reads its settings, and some of its background futures, from the session active in the
calling JVM thread (`SparkSession.active`). PySpark gives each Python thread a JVM thread of its
own, with no active session: a merge's worker thread or the log maintainer's thread must set one,
or Delta 4.4 fails with DELTA_SPARK_SESSION_NOT_SET once a checkpoint provider it builds in the
background is read (found by bench/log_upkeep.py, for commits and for checkpoints alike).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import SparkSession

from compactor.delta.files import jvm_class

_SESSIONS: weakref.WeakKeyDictionary[SparkSession, dict[tuple[tuple[str, str], ...], Any]] = (
    weakref.WeakKeyDictionary()
)
_SESSIONS_LOCK = threading.Lock()


def session_with(spark: SparkSession, settings: dict[str, str]) -> Any:
    """A JVM session beside `spark`'s with `settings` on top of its own, made once per set of
    settings and kept: a session per call would register Spark listeners per call."""
    key = tuple(sorted(settings.items()))
    with _SESSIONS_LOCK:
        made = _SESSIONS.setdefault(spark, {})
        session = made.get(key)
        if session is None:
            session = made[key] = spark._jsparkSession.newSession()
            for name, value in settings.items():
                session.conf().set(name, value)
        return session


@contextmanager
def active_session(spark: SparkSession, settings: dict[str, str] | None = None) -> Iterator[None]:
    """Run the block with a session active in this thread: `spark`'s own, or one of its
    siblings holding `settings` (`session_with`); the thread's previous one restored after."""
    sessions = jvm_class(spark._jvm, "org.apache.spark.sql.SparkSession")
    previous = sessions.getActiveSession()
    sessions.setActiveSession(session_with(spark, settings) if settings else spark._jsparkSession)
    try:
        yield
    finally:
        if previous.isDefined():
            sessions.setActiveSession(previous.get())
        else:
            sessions.clearActiveSession()
