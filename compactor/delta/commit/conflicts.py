"""Delta's optimistic-concurrency failures, as the compactor's `CommitConflict`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import delta.exceptions as delta_errors  # also installs the JVM -> Python exception conversion

from compactor.errors import CommitConflict

# another writer committed first; a retry can resolve them
DELTA_CONFLICTS: tuple[type[BaseException], ...] = (
    delta_errors.DeltaConcurrentModificationException,
    delta_errors.ConcurrentWriteException,
    delta_errors.MetadataChangedException,
    delta_errors.ProtocolChangedException,
    delta_errors.ConcurrentAppendException,
    delta_errors.ConcurrentDeleteReadException,
    delta_errors.ConcurrentDeleteDeleteException,
    delta_errors.ConcurrentTransactionException,
)


@contextlib.contextmanager
def conflicts_as_commit_conflict() -> Iterator[None]:
    """Delta's typed conflict exceptions become `CommitConflict`; everything else passes."""
    try:
        yield
    except DELTA_CONFLICTS as exc:
        raise CommitConflict(f"{type(exc).__name__}: {exc}") from exc
