"""Named fault-injection points for crash tests; inert unless the environment enables one.

`COMPACTOR_FAULT_POINT=<name>` makes the process SIGKILL itself the first time it
reaches that point: no cleanup, no flush, exactly like a machine dying there.
"""

from __future__ import annotations

import os
import signal

FAULT_ENV = "COMPACTOR_FAULT_POINT"
AFTER_PLANNING = "after_planning"
AFTER_COMMIT = "after_commit"
AFTER_BOOKKEEPING = "after_bookkeeping"
BETWEEN_EMITS = "between_emits"
POINTS = (AFTER_PLANNING, AFTER_COMMIT, AFTER_BOOKKEEPING, BETWEEN_EMITS)


def fault_point(name: str) -> None:
    """Die here if the environment names this point (a no-op in production)."""
    if os.environ.get(FAULT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
