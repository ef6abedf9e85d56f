"""Loading the settings once: the sources in precedence order, and any mistake as one
``ConfigError`` naming the setting, its environment variable and the allowed form."""

from __future__ import annotations

import os
from typing import Any, Mapping

from pydantic import (
    ValidationError,
)

from spark_jobs.config.groups import (
    GROUPS,
)
from spark_jobs.config.settings import (
    FLAT_NAMES,
    Settings,
)
from spark_jobs.config.sources import (
    ENV_PREFIX,
    SOURCE_ENVIRON,
)
from spark_jobs.errors import ConfigError

# Never echoed back, not even in an error about their own value.
SECRET_SETTINGS = {"kafka_password"}


def load_settings(
    config_file: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build the settings once; raise ConfigError with the offending name on any mistake."""
    environ = dict(os.environ if env is None else env)
    if config_file:
        environ[f"{ENV_PREFIX}CONFIG"] = str(config_file)
    token = SOURCE_ENVIRON.set(environ)
    try:
        return Settings(**(overrides or {}))
    except ValidationError as exc:
        raise _config_error(exc) from None
    finally:
        SOURCE_ENVIRON.reset(token)


def _flat_name(loc: tuple) -> str | None:
    """The setting an error is about, by the name users write; None for a check of a whole
    group (several of its settings together)."""
    if len(loc) >= 2 and loc[0] in GROUPS:
        model = GROUPS[loc[0]]
        info = model.model_fields.get(str(loc[1]))
        if info is not None:
            return info.validation_alias if isinstance(info.validation_alias, str) else str(loc[1])
        return str(loc[1])
    if len(loc) == 1 and loc[0] not in GROUPS:
        return str(loc[0])
    return None


def _config_error(exc: ValidationError) -> ConfigError:
    """pydantic's errors, in the project's words: the setting, its value, the allowed form."""
    unknown = sorted(".".join(map(str, e["loc"])) for e in exc.errors() if e["type"] == "extra_forbidden")
    if unknown:
        return ConfigError(
            f"unknown setting(s): {', '.join(unknown)}",
            f"valid settings: {', '.join(FLAT_NAMES)}",
        )
    problems = []  # (what is wrong, where to fix it)
    for error in exc.errors():
        message = error["msg"].removeprefix("Value error, ")
        message = message[0].lower() + message[1:]
        name = _flat_name(tuple(error["loc"]))
        if name:
            shown = "'**********'" if name in SECRET_SETTINGS else repr(error["input"])
            problems.append((f"setting {name}={shown}: {message}",
                             f"set it in the config file or env {ENV_PREFIX}{name.upper()}"))
        else:
            problems.append((f"settings: {message}", "fix them in the config file or the environment"))
    if len(problems) == 1:
        return ConfigError(*problems[0])
    return ConfigError(f"{len(problems)} settings are invalid",
                       "fix them in the config file or the environment variables named above",
                       details=[f"{what} ({where})" for what, where in problems])
