"""sigflow's roles and first users in the production auth manager (FAB,
spark_jobs/airflow/auth_manager.py), set up in one idempotent step of the production set-up
(compose's airflow-init, ``sigflow airflow --production``)::

    SIGFLOW_AIRFLOW_PASSWORDS_FILE=FILE python -m spark_jobs.airflow.people

FILE holds ``{"user": "password", ...}`` for the first users (admin, operator, reviewer,
viewer): a secret read here and never printed or passed as an argument. A user missing is
created with its role; one already there keeps its password (people change their own in the
UI). The roles hold what each part of the work needs, no more:

* ``Viewer`` (Airflow's): read DAGs, runs, logs and Data Docs links.
* ``sigflow-operator``: the viewer's, and trigger, clear and mark runs (deploy, streaming,
  restart): Airflow's ``User`` role less answering Required Actions.
* ``sigflow-reviewer``: the viewer's, and answer Required Actions (restart approvals).
  FAB asks for edit permission on the DAG to answer one, so a reviewer may also pause a DAG;
  it may not trigger a run.
* ``Admin`` (Airflow's): everything, users and roles included.

More people: Security > List Users in the UI (as an admin), or ``airflow users create
--role sigflow-reviewer --use-random-password ...`` (docs/security.md).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

OPERATOR_ROLE, REVIEWER_ROLE = "sigflow-operator", "sigflow-reviewer"
# the first users and their roles; restart_approvers names reviewers by these user names
USERS = {"admin": "Admin", "operator": OPERATOR_ROLE, "reviewer": REVIEWER_ROLE, "viewer": "Viewer"}
FIRST_USERS_VARIABLE = "SIGFLOW_AIRFLOW_PASSWORDS_FILE"


def role_permissions(sm) -> dict[str, set[tuple[str, str]]]:
    """sigflow's roles as (action, resource) pairs, from FAB's own role definitions."""
    from airflow.providers.fab.www.security import permissions as p

    viewer = set(sm.VIEWER_PERMISSIONS)
    answer = (p.ACTION_CAN_EDIT, p.RESOURCE_HITL_DETAIL)
    return {
        OPERATOR_ROLE: (viewer | set(sm.USER_PERMISSIONS)) - {answer},
        REVIEWER_ROLE: viewer | {answer, (p.ACTION_CAN_EDIT, p.RESOURCE_DAG),
                                 (p.ACTION_CAN_ACCESS_MENU, p.RESOURCE_HITL_DETAIL)},
    }


def set_up(passwords: dict[str, str]) -> list[str]:
    """Airflow's roles synced, sigflow's created or completed, the first users created: a
    line per role and user saying what was done."""
    from airflow.providers.fab.auth_manager.cli_commands.utils import (
        get_application_builder,
    )

    lines = []
    with get_application_builder() as appbuilder:
        sm = appbuilder.sm
        sm.sync_roles()
        for name, wanted in role_permissions(sm).items():
            role = sm.find_role(name) or sm.add_role(name)
            held = {(permission.action.name, permission.resource.name) for permission in role.permissions}
            for action, resource in sorted(wanted - held):
                sm.add_permission_to_role(role, sm.create_permission(action, resource))
            lines.append(f"role {name}: " + (f"{len(wanted - held)} permission(s) added" if wanted - held else "as it is"))
        for user, role in USERS.items():
            if user not in passwords:
                continue
            if sm.find_user(username=user):
                lines.append(f"user {user}: exists, its password kept")
                continue
            sm.add_user(username=user, first_name=user, last_name="(sigflow)", email=f"{user}@sigflow.invalid",
                        role=sm.find_role(role), password=passwords[user])
            lines.append(f"user {user}: created, role {role}")
    return lines


def main() -> int:
    source = os.environ.get(FIRST_USERS_VARIABLE)
    if not source or not Path(source).is_file():
        print(f"people: set {FIRST_USERS_VARIABLE} to a JSON file of the first users' passwords", file=sys.stderr)
        return 2
    passwords = json.loads(Path(source).read_text())
    unknown = sorted(set(passwords) - set(USERS))
    if unknown or not all(isinstance(value, str) and len(value) >= 12 for value in passwords.values()):
        print(f"people: {source} must map {', '.join(USERS)} to passwords of 12 characters or more"
              + (f" (unknown: {', '.join(unknown)})" if unknown else ""), file=sys.stderr)
        return 2
    for line in set_up(passwords):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
