"""What an operator asks of a restart, as one value: the CLI's options and the sigflow_restart
form's fields arrive here, and the planning, the recorded intent and the audit read it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from spark_jobs.errors import ConfigError

ACTIONS = ("resume", "rewind", "recover")
RECOVER_FROM = ("delta", "earliest", "raw")  # where a recover's first batch reads from


@dataclass(frozen=True)
class RestartRequest:
    job: str
    action: str
    to_batch: int | None = None  # a rewind's target batch, or
    to_time: str | None = None  # the time (ISO 8601, UTC without a zone) it resolves to a batch by
    recover_from: str = "delta"
    force: bool = False  # a recover over a checkpoint that looks sound
    accept_state_loss: bool = False  # a recover from delta of a stateful job

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ConfigError(f"unknown restart action {self.action!r}", f"one of {', '.join(ACTIONS)}")
        if self.recover_from not in RECOVER_FROM:
            raise ConfigError(f"a recover reads from {', '.join(RECOVER_FROM)}, not {self.recover_from!r}",
                              "--from delta: after the batch the tables hold; --from earliest: rebuild from "
                              "Kafka; --from raw: rebuild from device_events_raw")
        self.rewind_time()  # refused here, where it enters

    def rewind_time(self) -> datetime | None:
        """``to_time`` as a time; one without a zone is UTC."""
        if not self.to_time:
            return None
        try:
            when = datetime.fromisoformat(self.to_time)
        except ValueError:
            raise ConfigError(f"to_time {self.to_time!r} is not an ISO 8601 time", "e.g. 2026-11-23T10:15:00") from None
        return when if when.tzinfo else when.replace(tzinfo=timezone.utc)

    def command(self) -> str:
        """The CLI command that applies this request (an intent's way to finish it)."""
        options = []
        if self.action == "rewind":
            options += ([f"--to-batch {self.to_batch}"] if self.to_batch is not None
                        else [f"--to-time {self.to_time}"] if self.to_time else [])
        if self.action == "recover":
            options += [f"--from {self.recover_from}"] + ["--force"] * self.force + \
                ["--accept-state-loss"] * self.accept_state_loss
        return " ".join(["sigflow checkpoint", self.action, self.job, *options, "--yes"])
