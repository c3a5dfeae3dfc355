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
# a merge has committed, its worker not reported yet, and other merges are in flight
WITH_MERGES_IN_FLIGHT = "with_merges_in_flight"


def fault_point(name: str, when: bool = True) -> None:
    """Die here if the environment names this point and `when` holds (a no-op in production)."""
    if when and os.environ.get(FAULT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
