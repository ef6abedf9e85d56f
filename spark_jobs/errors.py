"""Errors meant for people: one line that says what happened and what to do.

The CLI prints these without a traceback; anything else is a failure no check explains
yet, printed as its first line with its traceback behind ``-v``.
"""


class SigflowError(Exception):
    """A failure the operator can act on; ``hint`` says how. ``details`` are the lines that
    show it (a failed check's bad rows): the CLI prints them before the error, and they are
    part of the text an Airflow task log shows."""

    def __init__(self, message: str, hint: str = "", details: list[str] | tuple[str, ...] = ()):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = tuple(details)

    def __str__(self) -> str:
        text = f"{self.message} ({self.hint})" if self.hint else self.message
        return "\n".join([*self.details, text])


class Interrupted(SigflowError):
    """Stopped by Ctrl-C or SIGTERM; the message says what was done before it (exit 130)."""


class ConfigError(SigflowError):
    """A setting is missing, malformed or contradicts another."""


class BrokerUnavailable(SigflowError):
    """Kafka cannot be reached at the configured bootstrap servers."""


class KafkaRefused(BrokerUnavailable):
    """A broker answered but refused the connection: credentials, certificate or protocol."""


class NeedsRestart(SigflowError):
    """What only a restart of the job mends (a recover, a rewind, a restart left half done
    applied again): a run started again as things are fails alike."""


class DataLossError(NeedsRestart):
    """Offsets a checkpoint needs are no longer in Kafka and failOnDataLoss is true."""


class DriverDied(SigflowError):
    """The Spark driver JVM exited during a batch (out of memory, as measured so far)."""


class CheckpointIdentityLost(NeedsRestart):
    """A checkpoint has batches but not the id its Delta commits carry (sigflow.json)."""


class CheckpointDamaged(NeedsRestart):
    """A file in the checkpoint cannot be read as Spark or sigflow wrote it."""

    def __init__(self, message: str, hint: str = "", finding: str = ""):
        super().__init__(message, hint)
        self.finding = finding or message  # the damage, as a plan lists it


class JobAlreadyRunning(SigflowError):
    """Another live run holds the checkpoint's lease."""


class LeaseLost(SigflowError):
    """This run no longer holds its checkpoint's lease: another run took it over."""


def first_line(error: BaseException) -> str:
    """An error's first line that says something (Spark's and Delta's run on for a stack
    trace, or start with a blank line)."""
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
