"""Seats: the lowest free one is taken, a live holder's is never shared, a dead one's is free."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from compactor.kafka.seat import take_seat

HOLD = """
import sys, time
from pathlib import Path
from compactor.kafka.seat import take_seat
seat = take_seat("job", Path(sys.argv[1]), host="h")
print(seat.number, flush=True)
time.sleep(600)
"""


def test_jobs_beside_each_other_get_seats_of_their_own_and_a_released_one_is_taken_again(
    tmp_path: Path,
) -> None:
    first = take_seat("job", tmp_path, host="h")
    second = take_seat("job", tmp_path, host="h")
    other = take_seat("another job", tmp_path, host="h")
    assert (first.number, second.number, other.number) == (0, 1, 0)
    assert first.instance_id != second.instance_id and first.instance_id.endswith("-0")
    assert first.instance_id != other.instance_id, "another identity, another name"
    assert take_seat("job", tmp_path, host="h2").instance_id.startswith("compactor-h2-"), "named by host"
    first.release()
    first.release()  # twice: harmless
    assert take_seat("job", tmp_path, host="h").instance_id == first.instance_id


def test_a_killed_holders_seat_is_free_at_once_and_a_live_ones_is_not(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "0"
        beside = take_seat("job", tmp_path, host="h")
        assert beside.number == 1, "a live job's seat is never shared"
        beside.release()
        holder.kill()  # SIGKILL: the kernel releases its lock
        holder.wait()
        assert take_seat("job", tmp_path, host="h").number == 0
    finally:
        holder.kill()
        holder.wait()
