"""When the files of replaced segments are deleted (Delta's VACUUM), as Kylin cleans up after
merged segments."""

from __future__ import annotations

from datetime import timedelta

from pydantic import model_validator

from compactor.config.units import Duration, Frozen

# Delta's own safety check refuses a VACUUM that keeps less than `delta.deletedFileRetentionDuration`
# (7 days unless the table says otherwise): a reader or a time travel older than that would break.
DELTA_SAFE_RETENTION = timedelta(days=7)


class VacuumConfig(Frozen):
    """`vacuum:` of a table: keep replaced files `retention` long, delete older ones every `interval`."""

    enabled: bool = True
    """false: leave the table's files alone."""
    retention: Duration = DELTA_SAFE_RETENTION
    """Keep files that versions within this long still need; time travel inside it keeps working."""
    interval: Duration = timedelta(days=1)
    """Run VACUUM this often (the first run comes ten minutes after the job starts)."""
    allow_short_retention: bool = False
    """Accept a retention under Delta's 7-day safety check (lifted for this table's VACUUM only):
    readers and time travel older than the retention fail on deleted files."""

    @model_validator(mode="after")
    def _safe(self) -> VacuumConfig:
        if self.retention < timedelta(0):
            raise ValueError(f"retention {self.retention} is negative")
        if self.interval <= timedelta(0):
            raise ValueError(f"interval {self.interval} is not a positive duration")
        if self.retention < DELTA_SAFE_RETENTION and not self.allow_short_retention:
            raise ValueError(
                f"retention {self.retention} is shorter than Delta's safety check ({DELTA_SAFE_RETENTION.days} days): "
                "streaming readers and time travel older than it would fail on deleted files; "
                "set allow_short_retention: true to accept that"
            )
        return self

    @property
    def retain_hours(self) -> float:
        return self.retention.total_seconds() / 3600
