"""The ``sigflow_kafka`` Airflow connection: Kafka's credentials kept where Airflow keeps
secrets, handed to sigflow's settings (docs/security.md)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from spark_jobs.config import Settings
from spark_jobs.config import load_settings as _load_from_environment


class SigflowKafkaHook(BaseHook):
    """Reads the connection (login, password, extras ``security_protocol``,
    ``sasl_mechanism``, ``ca_file``) as sigflow setting overrides; no connection, none."""

    conn_name_attr = "kafka_conn_id"
    default_conn_name = "sigflow_kafka"
    conn_type = "generic"
    hook_name = "sigflow Kafka"

    def __init__(self, kafka_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.kafka_conn_id = kafka_conn_id

    def settings_overrides(self) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            conn = self.get_connection(self.kafka_conn_id)
        except AirflowNotFoundException:
            return {}
        overrides: dict[str, Any] = {}
        if conn.login:
            overrides["kafka_username"] = conn.login
        if conn.password:  # it replaces a password file the environment may name
            overrides.update(kafka_password=conn.password, kafka_password_file="")
        for key in ("security_protocol", "sasl_mechanism", "ca_file"):
            if key in conn.extra_dejson:
                overrides[f"kafka_{key}"] = conn.extra_dejson[key]
        return overrides


def load_settings() -> Settings:
    """The task environment's settings, with Kafka's credentials from the ``sigflow_kafka``
    connection when one is defined: Airflow then masks its password in task logs."""
    return _load_from_environment(overrides=SigflowKafkaHook().settings_overrides())
