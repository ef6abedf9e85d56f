"""Errors meant for people: one line that says what happened and what to do.

The CLI prints these without a traceback; anything else is a bug and keeps its traceback.
"""


class SigflowError(Exception):
    """A failure the operator can act on; ``hint`` says how."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class ConfigError(SigflowError):
    """A setting is missing, malformed or contradicts another."""


class BrokerUnavailable(SigflowError):
    """Kafka cannot be reached at the configured bootstrap servers."""


class DataLossError(SigflowError):
    """Offsets a checkpoint needs are no longer in Kafka and failOnDataLoss is true."""


class DriverDied(SigflowError):
    """The Spark driver JVM exited during a batch (out of memory, as measured so far)."""
