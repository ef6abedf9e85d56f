"""One typed configuration for every job, command and DAG, in groups: ``kafka`` (how to reach
it, its topics' shape), ``streaming`` (what a job reads and computes by: all a job is given),
``spark`` (where the JVMs run), ``operations`` (leases, approvals, quality, maintenance,
metrics) and ``local`` (the one-machine stand-ins), beside where things live.

Precedence, lowest first: the defaults below (they work on a laptop), a YAML file
(``--config`` or ``SIGFLOW_CONFIG``), ``SIGFLOW_<NAME>`` environment variables, then explicit
overrides from the command line. ``KAFKA_BOOTSTRAP_SERVERS`` is honoured as the conventional
name for ``kafka_bootstrap_servers``. Paths and URIs are built here and nowhere else.

The model is a pydantic-settings ``BaseSettings``: pydantic types and checks every value once,
when the settings load, and ``settings_customise_sources`` states the precedence. Any mistake
becomes one ``ConfigError`` naming the setting, its environment variable and the allowed form.
"""

from spark_jobs.config.groups import (
    GROUPED,
    GROUPS,
    KafkaSettings,
    LocalSettings,
    OperationsSettings,
    SparkSettings,
    StreamingSettings,
)
from spark_jobs.config.settings import (
    FLAT_NAMES,
    ObjectStore,
    Settings,
    armed_failpoints,
    default_jars_dir,
    load_settings,
    object_store,
    on_local_disk,
)
from spark_jobs.config.values import (
    ENV_PREFIX,
    Duration,
    duration_seconds,
    spark_interval,
)

__all__ = [
    "ENV_PREFIX", "FLAT_NAMES", "GROUPED", "GROUPS", "Duration", "KafkaSettings", "LocalSettings", "ObjectStore",
    "OperationsSettings", "Settings", "SparkSettings", "StreamingSettings", "armed_failpoints", "default_jars_dir",
    "duration_seconds", "load_settings", "object_store", "on_local_disk", "spark_interval",
]
