"""Airflow on this machine, in two shapes, both with the LocalExecutor and each component
(scheduler, dag-processor, triggerer, api-server) a process of its own, as
``docker-compose.yml`` runs them:

* **Laptop** (``make airflow`` / ``sigflow airflow``): the metadata in SQLite, where
  ``airflow standalone`` keeps it, and Airflow's simple auth manager (for development only).
* **Production** (``sigflow airflow --production``): the metadata in PostgreSQL
  (``spark_jobs/local/postgres.py``), every component signing with one generated JWT secret,
  people signed in by the FAB auth manager with sigflow's roles (``python -m
  spark_jobs.airflow.people`` creates them and the first users before Airflow starts).

Everything listens on 127.0.0.1 only. Airflow's log servers bind every interface (the host
is hard-coded in ``airflow.utils.serve_logs``); they serve task logs to an api-server on
another machine, and here the api-server reads them from the shared log folder, so the
scheduler and triggerer run with ``--skip-serve-logs`` (``airflow standalone`` cannot).
Measured on Airflow 3.3: off port 8080 the UI and the task runners need
``AIRFLOW__API__BASE_URL`` (and the execution API URL) to find the api-server.

Parallelism stays at 2 on a 2-core machine.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.config import Settings
from spark_jobs.errors import SigflowError
from spark_jobs.runtime.private_files import private_dir, write_private
from spark_jobs.runtime.waiting import wait_until

DAGS = Path(__file__).resolve().parents[2] / "dags"
ADMIN = "admin"
# Four eyes that can be used: an operator who triggers restarts and a reviewer who approves
# them (neither may change Airflow's settings), beside the admin; each with a generated password.
OPERATOR, REVIEWER = "operator", "reviewer"
USERS = {ADMIN: "admin", OPERATOR: "user", REVIEWER: "user"}  # the laptop's simple auth manager: user -> role
# The production shape's first users, in the FAB auth manager with sigflow's roles
# (spark_jobs/airflow/people.py): a viewer besides
VIEWER = "viewer"
PEOPLE = (ADMIN, OPERATOR, REVIEWER, VIEWER)
# where each shape's generated passwords are kept, in the private Airflow home
SIMPLE_FILE = "simple_auth_manager_passwords.json.generated"
PEOPLE_FILE = "passwords.json"
COMPONENTS = ("metadatabase", "scheduler", "dag_processor", "triggerer")
# the api-server last: by the time it answers, the others have started
COMPONENT_COMMANDS = (("scheduler", "--skip-serve-logs"), ("dag-processor",), ("triggerer", "--skip-serve-logs"),
                      ("api-server",))


# Airflow's production settings, shared with docker-compose.yml's Airflow services.
PRODUCTION_ENV_FILE = Path(__file__).resolve().parents[2] / "infra" / "airflow" / "airflow.env"


def production_settings() -> dict[str, str]:
    """The KEY=VALUE lines of infra/airflow/airflow.env (compose's env_file format)."""
    lines = PRODUCTION_ENV_FILE.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.lstrip().startswith("#"))


def environment(settings: Settings, port: int) -> dict[str, str]:
    """Airflow settings for serving sigflow's DAGs on 127.0.0.1:port."""
    url = f"http://127.0.0.1:{port}"
    venv_bin = str(Path(sys.executable).parent)
    return {
        "AIRFLOW_HOME": str(settings.airflow_home.resolve()),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{user}:{role}" for user, role in USERS.items()),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": url,
        "AIRFLOW__API__WORKERS": "1",
        # the deploy DAG's spark-submit: the local master of the embedded mode, given a thread
        # per partition of a topic (the real-time job holds a task slot per partition of
        # device-alerts for as long as it runs)
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": settings.spark.master_with_slots(
            settings.kafka.topic_partitions)}),
        # Airflow's OpenLineage provider: each DAG and task run as events beside the jobs'
        **airflow_lineage_env(settings),
        "PYSPARK_PYTHON": sys.executable,
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
        "SIGFLOW_DATA_DIR": str(Path(settings.data_dir).resolve()),
        # spark-submit's driver (and its UI) start before sigflow's code can say where to bind
        **({"SPARK_LOCAL_IP": "127.0.0.1"} if settings.spark.on_this_machine else {}),
    }


def airflow_lineage_env(settings: Settings) -> dict[str, str]:
    """Airflow's OpenLineage provider configured to write where `sigflow lineage` reads."""
    from spark_jobs.runtime.lineage_events import transport

    settings.lineage_path.mkdir(parents=True, exist_ok=True)
    return {
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport(settings, settings.lineage_path.resolve() / "airflow.jsonl")),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "airflow",
    }


@dataclass
class LocalAirflow:
    settings: Settings
    port: int
    process: subprocess.Popen  # the api-server
    log_file: Path
    others: tuple[subprocess.Popen, ...] = ()  # the other components
    on_postgres: bool = False  # the production shape: PostgreSQL is stopped with the rest
    password_file: Path | None = None  # each user's password (private), None: the laptop's

    def __post_init__(self):
        self.password_file = self.password_file or self.settings.airflow_home / SIMPLE_FILE

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def password(self, user: str = ADMIN) -> str:
        return json.loads(self.password_file.read_text())[user]

    def health(self) -> dict:
        with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=5) as response:
            return json.load(response)

    def wait_ready(self, timeout: float = 240.0, progress=print) -> None:
        """Wait until every component reports healthy, or fail saying which did not."""
        said = ["the api-server did not answer"]

        def ready() -> bool:
            for process in (self.process, *self.others):
                if process.poll() is not None:
                    raise SigflowError(
                        f"`{' '.join(Path(a).name for a in process.args)}` exited with code {process.returncode}",
                        f"see the logs in {self.settings.airflow_home}",
                    )
            try:
                health = self.health()
                waiting = [c for c in COMPONENTS if (health.get(c) or {}).get("status") != "healthy"]
                if not waiting and self.password_file.exists():
                    return True
                now = f"waiting for {', '.join(waiting) or 'the admin password file'}"
            except (urllib.error.URLError, OSError, ValueError):
                now = "waiting for the api-server to answer"
            if now != said[-1]:
                progress(f"airflow: {now}")
                said.append(now)
            return False

        if not wait_until(ready, timeout_s=timeout, every_s=3):
            raise SigflowError(f"Airflow did not become ready in {timeout:.0f} s: {said[-1]}",
                               f"see its log: {self.log_file}")

    def token(self, user: str = ADMIN) -> str:
        """A JWT for the REST API, from the user's generated password."""
        return self.request("POST", "/auth/token", {"username": user, "password": self.password(user)},
                            token=None)["access_token"]

    def request(self, method: str, path: str, body: dict | None = None, token: str | None = "") -> dict:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token or self.token()}"
        data = json.dumps(body).encode() if body is not None else None
        call = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        with urllib.request.urlopen(call, timeout=30) as response:
            answer = response.read()
        return json.loads(answer) if answer else {}  # a DELETE's 204 has no body

    def trigger(self, dag_id: str, conf: dict, timeout: float = 120.0, user: str = ADMIN) -> str:
        """Unpause a DAG once the dag-processor has parsed it and start a run as ``user``; returns its id."""
        token = self.token(user)

        def unpause() -> bool:
            try:
                self.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False}, token=token)
                return True
            except urllib.error.HTTPError as exc:
                if exc.code == 404:  # not parsed yet
                    return False
                raise

        if not wait_until(unpause, timeout_s=timeout, every_s=2):
            raise SigflowError(f"the dag-processor did not parse {dag_id} within {timeout:.0f} s",
                               f"see the logs in {self.settings.airflow_home}")
        run = self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf}, token=token)
        return run["dag_run_id"]

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 600.0) -> tuple[str, dict[str, str]]:
        """Wait for a DAG run to finish; returns its state and each task's."""
        token = self.token()
        path = f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}"
        states = []

        def finished() -> bool:
            states.append(self.request("GET", path, token=token)["state"])
            return states[-1] in ("success", "failed")

        if not wait_until(finished, timeout_s=timeout, every_s=3):
            raise SigflowError(f"{dag_id} run {run_id} still {states[-1]} after {timeout:.0f} s",
                               f"see {self.url}/dags/{dag_id}")
        state = states[-1]
        tasks = self.request("GET", f"{path}/taskInstances", token=token)["task_instances"]
        return state, {t["task_id"]: t["state"] for t in tasks}

    def wait_for_required_action(self, dag_id: str, run_id: str, timeout: float = 300.0) -> dict:
        """The run's first Required Action (a task waiting for a person's answer), once it waits."""
        token = self.token()
        path = f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/hitlDetails?response_received=false"
        pending = wait_until(lambda: self.request("GET", path, token=token)["hitl_details"], timeout_s=timeout, every_s=2)
        if not pending:
            raise SigflowError(f"{dag_id} run {run_id} asked for no answer within {timeout:.0f} s",
                               f"see {self.url}/dags/{dag_id}")
        return pending[0]

    def answer(self, action: dict, option: str, user: str = ADMIN) -> dict:
        """Choose ``option`` in a Required Action as ``user``, as the UI's Approve or Reject button does."""
        ti = action["task_instance"]
        path = (f"/api/v2/dags/{ti['dag_id']}/dagRuns/{urllib.parse.quote(ti['dag_run_id'])}"
                f"/taskInstances/{ti['task_id']}/{ti['map_index']}/hitlDetails")
        return self.request("PATCH", path, {"chosen_options": [option]}, token=self.token(user))

    def stop(self, timeout: float = 30.0, progress=lambda line: None) -> None:
        """Stop every component: SIGINT (its ^C) to each process group, SIGKILL if any
        lingers past ``timeout``; then the production shape's PostgreSQL. ``progress`` gets
        a line as each component ends (the scheduler waits for its task runners)."""
        processes = (self.process, *self.others)
        began = time.monotonic()
        for process in processes:
            if process.poll() is None:
                _signal_group(process, signal.SIGINT)
        for process in processes:
            try:
                process.wait(max(timeout - (time.monotonic() - began), 0.1))
                progress(f"  {_component(process)} stopped after {time.monotonic() - began:.0f} s")
            except subprocess.TimeoutExpired:
                progress(f"  {_component(process)} still running after {timeout:.0f} s: killing it")
        # killed members linger until reaped
        wait_until(lambda: not any([_signal_group(p, signal.SIGKILL) for p in processes]), timeout_s=15, every_s=0.5)
        for process in processes:
            if process.poll() is None:
                process.wait(10)
        if self.on_postgres:
            from spark_jobs.local import postgres

            postgres.stop(self.settings)


def _component(process: subprocess.Popen) -> str:
    """The Airflow command a process runs: scheduler, api-server ..."""
    return next(arg for arg in process.args[1:] if not arg.startswith("-"))


def _signal_group(process: subprocess.Popen, signum: int) -> bool:
    """Signal a process's group; False once no process is left in it."""
    try:
        os.killpg(process.pid, signum)
        return True
    except ProcessLookupError:
        return False


def _check_port_free(port: int) -> None:
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            raise SigflowError(f"port {port} on 127.0.0.1 is already in use",
                               "stop what listens there, or set SIGFLOW_AIRFLOW_PORT to a free port")


def _passwords(passwords: Path, users) -> Path:
    """Each user's password, generated here into a private file: Airflow's simple auth
    manager would otherwise make them itself and print them in the api-server's log, and the
    production set-up reads its first users' from a secret."""
    import secrets

    known = json.loads(passwords.read_text() or "{}") if passwords.exists() else {}
    missing = {user: secrets.token_urlsafe(16) for user in users if user not in known}
    if missing:
        write_private(passwords, json.dumps({**known, **missing}) + "\n")
    passwords.chmod(0o600)
    return passwords


def _launch(env: dict[str, str], log_file: Path, *command: str) -> subprocess.Popen:
    with open(log_file, "ab") as log:
        return subprocess.Popen(
            [str(Path(sys.executable).parent / "airflow"), *command],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # each in its own group: stopped with what it started
            umask=0o077,  # what Airflow writes in its home (logs, XCom files) is its owner's only
        )


def start(settings: Settings, port: int | None = None, extra_env: dict[str, str] | None = None) -> LocalAirflow:
    """Airflow's components on SQLite in AIRFLOW_HOME; logs: <airflow_home>/<component>.log."""
    port = port or settings.local.airflow_port
    _check_port_free(port)
    private_dir(settings.airflow_home)
    env = {**os.environ, **(extra_env or {}), **environment(settings, port)}
    return _start_components(settings, port, env, on_postgres=False)


def start_production(settings: Settings, port: int | None = None,
                     extra_env: dict[str, str] | None = None) -> LocalAirflow:
    """Airflow as production runs it: PostgreSQL, one JWT secret for every component,
    compose's settings (infra/airflow/airflow.env). Logs: <airflow_home>/<component>.log."""
    import secrets

    from spark_jobs.local import postgres

    port = port or settings.local.airflow_port
    _check_port_free(port)
    home = private_dir(settings.airflow_home)
    database = postgres.start(settings)
    secret_file = home / "jwt_secret"
    if not secret_file.exists():
        write_private(secret_file, secrets.token_urlsafe(32))
    env = {
        **os.environ, **(extra_env or {}), **environment(settings, port),
        **production_settings(),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database.url(),
        "AIRFLOW__API_AUTH__JWT_SECRET": secret_file.read_text(),  # every component signs alike
    }
    try:
        return _start_components(settings, port, env, on_postgres=True)
    except BaseException:
        postgres.stop(settings)
        raise


def _start_components(settings: Settings, port: int, env: dict[str, str], on_postgres: bool) -> LocalAirflow:
    """``airflow db migrate`` (the production shape: then sigflow's roles and first users),
    then each component in a process group of its own."""
    home = settings.airflow_home
    passwords = (_passwords(home / PEOPLE_FILE, PEOPLE) if on_postgres else
                 _passwords(home / SIMPLE_FILE, USERS))
    _set_up(env, home, "`airflow db migrate`", "airflow", "db", "migrate")
    if on_postgres:
        _set_up({**env, "SIGFLOW_AIRFLOW_PASSWORDS_FILE": str(passwords)}, home,
                "the roles and first users (python -m spark_jobs.airflow.people)", sys.executable, "-m",
                "spark_jobs.airflow.people")
    processes = [_launch(env, home / f"{command[0]}.log", *command) for command in COMPONENT_COMMANDS]
    return LocalAirflow(settings, port, processes[-1], home / "api-server.log", tuple(processes[:-1]), on_postgres,
                        passwords)


def _set_up(env: dict[str, str], home: Path, what: str, program: str, *args: str) -> None:
    """One step of Airflow's set-up, its output kept in <airflow_home>/setup.log."""
    command = [str(Path(sys.executable).parent / program) if program == "airflow" else program, *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    with open(home / "setup.log", "a") as log:
        log.write(f"$ {' '.join(args)}\n{done.stdout}{done.stderr}")
    if done.returncode != 0:
        raise SigflowError(f"{what} failed: " + (done.stderr or done.stdout).strip()[-300:],
                           f"see {home / 'setup.log'} and the metadata database settings")
