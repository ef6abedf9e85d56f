"""``Settings``: where things live, then the groups; the paths and URIs built from them (here
and nowhere else); ``load_settings``, which builds them once from their sources in precedence
order; and the object store's and the fault tests' process variables."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from pydantic import (
    BaseModel,
    ValidationError,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from spark_jobs.config.groups import (
    GROUPED,
    GROUPS,
    KafkaSettings,
    LocalSettings,
    OperationsSettings,
    SparkSettings,
    StreamingSettings,
)
from spark_jobs.config.reporting import config_error
from spark_jobs.config.sources import SOURCE_ENVIRON, EnvironmentSource, YamlFileSource
from spark_jobs.config.values import ENV_PREFIX


class Settings(BaseSettings):
    """Where things live, then the groups. Each setting keeps one flat name for users
    (``SIGFLOW_KAFKA_USERNAME``, YAML ``kafka_username``); code reads it by group
    (``settings.kafka.username``), and a job is given only ``settings.streaming``."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid", validate_default=True)

    # Where everything local lives; object-store URIs are accepted for the two roots.
    data_dir: str = "./data"
    delta_root: str = ""  # default: <data_dir>/delta
    checkpoint_root: str = ""  # default: <data_dir>/checkpoints
    # Where `sigflow jars fetch` put the pinned JARs (Spark's Kafka source, delta-spark, the
    # Kafka broker; see infra/jars/).
    jars_dir: str = ""  # default: <python environment>/share/sigflow/jars
    quality_dir: str = ""  # default: <data_dir>/quality (GX project and Data Docs HTML)
    airflow_dir: str = ""  # default: <data_dir>/airflow (AIRFLOW_HOME: logs, password)
    lineage_dir: str = ""  # default: <data_dir>/lineage (OpenLineage events, a file per job and Airflow's)

    kafka: KafkaSettings = KafkaSettings()
    streaming: StreamingSettings = StreamingSettings()
    spark: SparkSettings = SparkSettings()
    operations: OperationsSettings = OperationsSettings()
    local: LocalSettings = LocalSettings()

    source_file: str = ""  # which YAML file was read, if any (set by load_settings)

    @model_validator(mode="before")
    @classmethod
    def _grouped(cls, data: Any) -> Any:
        """Flat names into their groups; a group given whole (YAML ``kafka: {...}``) is
        kept, and a flat name beside it wins for its field."""
        if not isinstance(data, dict):
            return data
        out = {key: value for key, value in data.items() if key not in GROUPED}
        for key, value in data.items():
            if key in GROUPED:
                group, field = GROUPED[key]
                section = out.get(group) or {}
                if isinstance(section, BaseModel):
                    section = section.model_dump()
                if not isinstance(section, dict):
                    raise ValueError(f"{group} is a group of settings: set its fields by their own names, "
                                     f"such as {key}")
                section = dict(section)
                section[field] = value
                out[group] = section
        return out

    def flat(self) -> dict[str, Any]:
        """Every setting under its flat name (what a config file or the environment sets)."""
        values = {name: getattr(self, name) for name in type(self).model_fields if name not in GROUPS}
        for name, (group, field) in GROUPED.items():
            values[name] = getattr(getattr(self, group), field)
        return values

    # ---- derived locations -------------------------------------------------------------
    @property
    def delta_root_uri(self) -> str:
        return self.delta_root or str(Path(self.data_dir) / "delta")

    @property
    def checkpoint_root_uri(self) -> str:
        return self.checkpoint_root or str(Path(self.data_dir) / "checkpoints")

    def table_uri(self, table: str) -> str:
        return _join(self.delta_root_uri, table)

    def checkpoint_uri(self, job: str) -> str:
        return _join(self.checkpoint_root_uri, job)

    @property
    def quality_path(self) -> Path:
        return Path(self.quality_dir or Path(self.data_dir) / "quality")

    @property
    def lineage_path(self) -> Path:
        return Path(self.lineage_dir or Path(self.data_dir) / "lineage")

    @property
    def airflow_home(self) -> Path:
        return Path(self.airflow_dir or Path(self.data_dir) / "airflow")

    @property
    def jars_path(self) -> Path:
        return Path(self.jars_dir) if self.jars_dir else default_jars_dir()

    def progress_file(self, job: str) -> Path:
        """The job's per-batch JSON progress lines (docs/observability.md)."""
        return Path(self.data_dir) / "progress" / f"{job}.jsonl"

    @property
    def broker_dir(self) -> Path:
        return Path(self.data_dir) / "broker"

    def replace(self, **changes: Any) -> "Settings":
        """A copy with some settings changed (flat names), validated as loading validates."""
        return load_settings(env={}, overrides={**self.flat(), **changes})

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Highest first: command-line overrides, SIGFLOW_* variables, the YAML file.
        return init_settings, EnvironmentSource(settings_cls), YamlFileSource(settings_cls)


# Every setting's flat name, as users write it.
FLAT_NAMES: tuple[str, ...] = tuple(
    [name for name in Settings.model_fields if name not in GROUPS and name != "source_file"] + list(GROUPED))


def _join(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}"


@dataclass(frozen=True)
class ObjectStore:
    """Where S3 is, from the AWS SDKs' own variables (AWS_ENDPOINT_URL, AWS_REGION or
    AWS_DEFAULT_REGION): the ones delta-rs, pyarrow and boto3 read themselves, so Spark's S3A
    and sigflow's own S3 calls are pointed by the same ones. Empty: AWS's own S3."""

    endpoint_url: str = ""
    region: str = ""


def object_store(environ: Mapping[str, str] | None = None) -> ObjectStore:
    env = os.environ if environ is None else environ
    return ObjectStore(env.get("AWS_ENDPOINT_URL", ""), env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION", ""))


def armed_failpoints() -> str:
    """SIGFLOW_FAILPOINTS: the crash points fault tests arm in a job they start (runtime/failpoints.py)."""
    return os.environ.get("SIGFLOW_FAILPOINTS", "")


def default_jars_dir() -> Path:
    """Beside the Python environment that holds pyspark: the JARs belong to that install."""
    return Path(sys.prefix) / "share" / "sigflow" / "jars"


def on_local_disk(uri: str) -> bool:
    """Whether a table or checkpoint URI names this machine's file system (no scheme, or file:)."""
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):", uri)
    return scheme is None or scheme.group(1).lower() == "file"


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
        raise config_error(exc, FLAT_NAMES) from None
    finally:
        SOURCE_ENVIRON.reset(token)
