"""Where settings come from besides the command line: every ``SIGFLOW_<NAME>`` variable (an
unknown one is reported, not ignored) and the YAML file (``--config`` or ``SIGFLOW_CONFIG``),
which may not hold a password."""

from __future__ import annotations

import os
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic.fields import FieldInfo
from pydantic_settings import (
    PydanticBaseSettingsSource,
)

from spark_jobs.config.values import ENV_PREFIX
from spark_jobs.errors import ConfigError

# Process-level variables that are not settings: the config file and fault-test crash points.
RESERVED_ENV = {"SIGFLOW_CONFIG", "SIGFLOW_FAILPOINTS"}


# The environment the sources read: os.environ, or the mapping load_settings(env=...) was
# given (tests and `replace` read none). A context variable, since pydantic-settings builds
# its sources in a classmethod that sees no per-call state.
SOURCE_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("sigflow_environ", default=None)


class _Source(PydanticBaseSettingsSource):
    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self().get(field_name), field_name, False

    @staticmethod
    def environ() -> Mapping[str, str]:
        environ = SOURCE_ENVIRON.get()
        return os.environ if environ is None else environ


class EnvironmentSource(_Source):
    """Every SIGFLOW_<NAME> variable, known or not: an unknown one is a mistake to report,
    not to ignore (pydantic-settings' own env source reads only the known names)."""

    def __call__(self) -> dict[str, Any]:
        environ = self.environ()
        values = {}
        if environ.get("KAFKA_BOOTSTRAP_SERVERS"):
            values["kafka_bootstrap_servers"] = environ["KAFKA_BOOTSTRAP_SERVERS"]
        for key, raw in environ.items():
            if key.startswith(ENV_PREFIX) and key not in RESERVED_ENV:
                values[key[len(ENV_PREFIX):].lower()] = raw
        return values


ONE_SETTING_A_LINE = "write one `setting: value` per line (docs/configuration.md)"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What the parser found and where, without the file's lines it quotes (a line may hold a
    secret)."""
    problem, mark = getattr(exc, "problem", None), getattr(exc, "problem_mark", None)
    if not problem:
        return type(exc).__name__
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark else problem


class YamlFileSource(_Source):
    def __call__(self) -> dict[str, Any]:
        config_file = self.environ().get(f"{ENV_PREFIX}CONFIG")
        if not config_file:
            return {}
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist", "check --config / SIGFLOW_CONFIG")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {_yaml_problem(exc)}", ONE_SETTING_A_LINE) from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping of setting: value", ONE_SETTING_A_LINE)
        grouped = loaded.get("kafka") if isinstance(loaded.get("kafka"), dict) else {}
        if "kafka_password" in loaded or {"password", "kafka_password"} & set(grouped):
            raise ConfigError(f"config file {path} sets kafka_password: a password does not belong in a file "
                              "that gets committed",
                              f"remove it; set {ENV_PREFIX}KAFKA_PASSWORD or kafka_password_file instead")
        return {**loaded, "source_file": str(path)}


