"""The production auth manager: Airflow's FAB auth manager (users and roles in the metadata
database, passwords hashed, LDAP or OAuth where ``webserver_config.py`` says so), with one
change. FAB identifies a user by the row id of its database; a Required Action's assigned
users (``restart_approvers``, spark_jobs/airflow/tasks.py) name people by user name, the
identity every auth manager shares, so either one admits the user."""

from __future__ import annotations

from airflow.providers.fab.auth_manager.fab_auth_manager import FabAuthManager


class SigflowFabAuthManager(FabAuthManager):
    def is_authorized_hitl_task(self, *, assigned_users: set[str], user) -> bool:
        return user.get_id() in assigned_users or user.get_name() in assigned_users
