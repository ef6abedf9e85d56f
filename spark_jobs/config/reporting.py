"""How a mistake in the settings is reported: pydantic's errors, in the project's words, as one
``ConfigError`` naming the setting by the name users write, its environment variable and the
allowed form; a secret's value is never echoed."""

from __future__ import annotations

import difflib

from pydantic import ValidationError

from spark_jobs.config.groups import GROUPS
from spark_jobs.config.values import ENV_PREFIX
from spark_jobs.errors import ConfigError

# Never echoed back, not even in an error about their own value.
SECRET_SETTINGS = {"kafka_password"}


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


def config_error(exc: ValidationError, flat_names: tuple[str, ...]) -> ConfigError:
    """pydantic's errors, in the project's words: the setting, its value, the allowed form."""
    unknown = sorted(".".join(map(str, e["loc"])) for e in exc.errors() if e["type"] == "extra_forbidden")
    if unknown:
        close = {name: found[0] for name in unknown
                 if (found := difflib.get_close_matches(name.rpartition(".")[2], flat_names, n=1))}
        guesses = ", ".join(guess if len(unknown) == 1 else f"{guess} for {name}" for name, guess in close.items())
        return ConfigError(
            f"unknown setting(s): {', '.join(unknown)}",
            (f"did you mean {guesses}? " if guesses else "")
            + "the settings and their defaults: docs/configuration.md",
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
