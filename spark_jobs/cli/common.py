"""What every command group shares: the settings a command runs with, and the start, stop and
status of a process this machine runs for sigflow."""

from __future__ import annotations

import argparse

from spark_jobs.config import Settings, load_settings


def whole_number(text: str) -> int:
    """An argument counting something, or naming a batch: 0 or more (argparse names the flag)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is below 0")
    return value


def settings_of(args: argparse.Namespace) -> Settings:
    return load_settings(config_file=args.config)


def run_service(action: str, name: str, start, stop, status) -> int:
    """`start|stop|status` of a process this machine runs for sigflow (broker, cluster,
    PostgreSQL): ``start`` returns the lines to print, ``stop`` whether one was running,
    ``status`` its lines, empty when none runs (exit code 1, as service managers expect)."""
    if action == "start":
        lines, code = start(), 0
    elif action == "stop":
        lines, code = [f"{name} stopped" if stop() else f"no {name} was running"], 0
    else:
        lines = status()
        lines, code = lines or [f"no {name} is running"], 0 if lines else 1
    print("\n".join(lines))
    return code
