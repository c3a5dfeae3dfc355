"""A job's seat on its host: the name under which it is a static member of the lease's group.

A job restarted after a crash should take back its shards at once, not wait for the dead
process's session to expire. Kafka's static membership (`group.instance.id`) does that: a
member that joins under the name of one the group still holds replaces it, with its
assignment and without a rebalance. The danger is a name shared by two live jobs; the second
would fence the first. A seat rules that out on one host: seat k of a job identity (host,
warehouse, topic, checkpoint) is an exclusive `flock` on a local file, which the kernel
releases when the process dies, SIGKILL included. A job takes the lowest free seat, so a
restarted job gets the seat (and the name) its dead predecessor had, and a second job started
beside a live one gets another seat and joins as a newcomer.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path

MAX_SEATS = 64  # jobs of one identity on one host; more is a mistake, not a deployment


def seats_directory() -> Path:
    """Where the lock files live: this host's temporary directory (a seat is per host)."""
    return Path(tempfile.gettempdir()) / "compactor-seats"


@dataclass(slots=True)
class Seat:
    number: int
    instance_id: str  # the static member's name in the group: host, identity hash, seat
    _fd: int | None

    def release(self) -> None:
        """Give the seat back (the process's exit does it too); a second call does nothing."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def take_seat(identity: str, directory: Path | None = None, host: str | None = None) -> Seat:
    """The lowest free seat of `identity` on this host, held until released or the process ends."""
    host = host or socket.gethostname()
    key = hashlib.sha256(f"{host}\n{identity}".encode()).hexdigest()[:16]
    folder = directory or seats_directory()
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(MAX_SEATS):
        fd = os.open(folder / f"{key}-{number}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as held:
            os.close(fd)
            if held.errno in (errno.EAGAIN, errno.EACCES):
                continue
            raise
        return Seat(number, f"compactor-{host}-{key}-{number}", fd)
    raise RuntimeError(f"all {MAX_SEATS} seats of this job identity are taken on {host} ({folder})")
