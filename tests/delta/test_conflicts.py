"""Delta's conflicts are recognised by their types, not by names in messages."""

from __future__ import annotations

import delta.exceptions
import pytest

from compactor.delta.commit.conflicts import DELTA_CONFLICTS, conflicts_as_commit_conflict
from compactor.errors import CommitConflict


@pytest.mark.parametrize("kind", DELTA_CONFLICTS, ids=lambda k: k.__name__)
def test_each_delta_conflict_becomes_a_commit_conflict(kind: type[Exception]) -> None:
    with pytest.raises(CommitConflict) as err, conflicts_as_commit_conflict():
        raise kind(message="a concurrent transaction won")  # type: ignore[call-arg]
    assert isinstance(err.value.__cause__, kind)


def test_an_error_that_only_mentions_a_conflict_is_not_one() -> None:
    with pytest.raises(ValueError, match="ConcurrentAppendException"), conflicts_as_commit_conflict():
        raise ValueError("column ConcurrentAppendException not found")


def test_the_conflicts_are_the_ones_delta_spark_ships() -> None:
    assert set(DELTA_CONFLICTS) == {getattr(delta.exceptions, name) for name in delta.exceptions.__all__}
