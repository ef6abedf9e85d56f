"""A Spark standalone cluster on loopback: one master and its workers, run from the Spark
the project installs (pyspark's own ``Master`` and ``Worker`` classes and JARs).

It is what ``docker-compose.yml``'s ``spark-master`` and ``spark-worker`` services run,
started as processes, so the move from ``local[*]`` to a cluster is proven on one machine:
point ``spark_master`` at it and ``sigflow run``/``pipeline`` submit there; the executors
on the workers read Kafka and write Delta. Each worker has one core and a capped memory.

Logs, work directories and ``cluster.json`` (the addresses and pids) live under
``<data_dir>/cluster/``; ``stop`` only signals processes recorded there that still are a
Spark master or worker.

As compose's cluster, it takes only applications that hold its shared secret
(``spark.authenticate``): generated at the first start into ``<data_dir>/cluster/auth_secret``
(0600), given to the daemons in a configuration folder only this user reads, never on a
command line. A co-tenant of the host cannot submit an application whose executors would
run as this user with the workers' environment (Kafka's password, object-store keys).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from spark_jobs.config import Settings
from spark_jobs.errors import SigflowError
from spark_jobs.local.broker import free_port
from spark_jobs.runtime.private_files import private_dir, write_private
from spark_jobs.runtime.processes import is_recorded_process, start_time
from spark_jobs.runtime.spark import LOOPBACK_CLUSTER_SECRET
from spark_jobs.runtime.waiting import wait_until

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
DAEMON_HEAP = "512m"  # the master and worker daemons themselves; executors get their own JVMs


@dataclass(frozen=True)
class ClusterInfo:
    master_url: str  # spark://127.0.0.1:<port>, what spark_master is set to
    ui_url: str  # the master's web UI; its /json/ is what `status` reads
    master_pid: int
    worker_pids: list[int] = field(default_factory=list)
    # each daemon's start time by pid, so a reused pid is not taken for one of them
    process_started: dict[str, float] = field(default_factory=dict)

    def runs(self, pid: int, main_class: str) -> bool:
        return is_recorded_process(pid, self.process_started.get(str(pid)), main_class)

    def workers_alive(self) -> list[int]:
        return [pid for pid in self.worker_pids if self.runs(pid, WORKER_CLASS)]


def cluster_dir(settings: Settings) -> Path:
    return Path(settings.data_dir) / "cluster"


def _state_file(settings: Settings) -> Path:
    return cluster_dir(settings) / "cluster.json"


def recorded(settings: Settings) -> ClusterInfo | None:
    """The cluster recorded under data_dir if its master is alive, else None."""
    path = _state_file(settings)
    if not path.exists():
        return None
    info = ClusterInfo(**json.loads(path.read_text()))
    return info if info.runs(info.master_pid, MASTER_CLASS) else None


def auth_secret_file(settings: Settings) -> Path:
    """The cluster's shared secret, made at its first start (0600): what drivers read
    (spark_auth_secret_file; a driver with this data_dir finds it by itself)."""
    path = cluster_dir(settings).joinpath(*LOOPBACK_CLUSTER_SECRET[1:])
    if not path.exists():
        write_private(path, secrets.token_hex(32))
    return path


def _daemon_conf(settings: Settings) -> Path:
    """SPARK_CONF_DIR of the daemons: spark-defaults.conf with the shared secret, in a
    folder only this user enters."""
    conf = private_dir(cluster_dir(settings) / "conf")
    write_private(conf / "spark-defaults.conf", "spark.authenticate true\n"
                  f"spark.authenticate.secret {auth_secret_file(settings).read_text().strip()}\n")
    return conf


def _spark_home(settings: Settings) -> Path:
    """A SPARK_HOME for the daemons: pyspark's own jars, bin and python, and the RELEASE
    marker pip's pyspark lacks: without it a worker looks for the JARs of a source build."""
    import pyspark

    installed = Path(pyspark.__file__).parent
    home = cluster_dir(settings) / "spark-home"
    home.mkdir(parents=True, exist_ok=True)
    for name in ("jars", "bin", "python", "sbin"):
        link = home / name
        if not link.exists():
            link.symlink_to(installed / name)
    (home / "conf").mkdir(exist_ok=True)
    (home / "RELEASE").write_text(f"Spark {pyspark.__version__} (pyspark, linked by sigflow)\n")
    return home


def _daemon(settings: Settings, main: str, log_name: str, *args: str) -> subprocess.Popen:
    from spark_jobs.runtime.jvm_options import LOG4J2_CONFIG
    from spark_jobs.runtime.spark import ensure_java

    ensure_java()
    home = _spark_home(settings)
    # SPARK_SCALA_VERSION: without it the launcher that builds executor commands looks for a
    # source tree's build directories before it looks at RELEASE (Spark's AbstractCommandBuilder).
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_SCALA_VERSION": "2.13", "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_LOG_DIR": str(cluster_dir(settings)), "SPARK_CONF_DIR": str(_daemon_conf(settings))}
    command = [
        str(Path(os.environ["JAVA_HOME"], "bin", "java")), f"-Xmx{DAEMON_HEAP}",
        f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}", "-Duser.timezone=UTC", *settings.spark.java_options.split(),
        "-cp", f"{home / 'conf'}:{home / 'jars'}/*", main, *args,
    ]
    with open(cluster_dir(settings) / log_name, "ab") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def master_state(ui_url: str, timeout_s: float = 3.0) -> dict:
    """The master's own account: workers, running and finished applications."""
    with urllib.request.urlopen(f"{ui_url}/json/", timeout=timeout_s) as response:
        return json.load(response)


def _wait(what: str, ready, processes: list[subprocess.Popen], settings: Settings, timeout_s: float) -> None:
    # OSError, ValueError: not answering yet, or a page that is not the JSON yet
    if not wait_until(ready, timeout_s=timeout_s, every_s=0.5, not_yet=(OSError, ValueError),
                      give_up=lambda: any(p.poll() is not None for p in processes)):
        for p in processes:
            p.kill()
        raise SigflowError(f"the Spark cluster's {what} did not come up within {timeout_s:g} s",
                           f"see the logs in {cluster_dir(settings)}")


def start(settings: Settings, timeout_s: float = 90.0) -> ClusterInfo:
    """Start the master and ``cluster_workers`` workers, or the workers missing from a
    recorded cluster (a killed worker comes back). Returns when every worker is registered."""
    private_dir(cluster_dir(settings))  # its secret, and its executors' work directories
    info = recorded(settings)
    started: list[subprocess.Popen] = []
    if info is None:
        port = settings.local.cluster_port or free_port()
        ui_port = settings.local.cluster_ui_port or free_port()
        master = _daemon(settings, MASTER_CLASS, "master.log", "--host", "127.0.0.1", "--port", str(port),
                         "--webui-port", str(ui_port))
        started.append(master)
        info = ClusterInfo(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}", master.pid,
                           process_started={str(master.pid): start_time(master.pid)})
        _wait("master", lambda: master_state(info.ui_url) is not None, started, settings, timeout_s)
    alive = info.workers_alive()
    for n in range(len(alive), settings.local.cluster_workers):
        work_dir = cluster_dir(settings) / f"worker-{n}"
        worker = _daemon(settings, WORKER_CLASS, f"worker-{n}.log", "--host", "127.0.0.1", "--cores", "1",
                         "--memory", settings.local.cluster_worker_memory, "--work-dir", str(work_dir),
                         "--webui-port", str(free_port()), info.master_url)
        started.append(worker)
        alive.append(worker.pid)
    started_at = {str(pid): info.process_started.get(str(pid)) or start_time(pid) for pid in (info.master_pid, *alive)}
    info = ClusterInfo(info.master_url, info.ui_url, info.master_pid, alive, started_at)
    _state_file(settings).write_text(json.dumps(asdict(info)))

    def all_registered() -> bool:
        workers = master_state(info.ui_url)["workers"]
        return sum(w["state"] == "ALIVE" for w in workers) >= settings.local.cluster_workers

    _wait("workers", all_registered, started, settings, timeout_s)
    return info


def stop(settings: Settings, timeout_s: float = 30.0) -> bool:
    """Stop the recorded workers, then the master. False when no cluster was running."""
    info = recorded(settings)
    _state_file(settings).unlink(missing_ok=True)
    if info is None:
        return False
    for pid, main in [*((pid, WORKER_CLASS) for pid in info.worker_pids), (info.master_pid, MASTER_CLASS)]:
        _terminate(info, pid, main, timeout_s)
    return True


def kill_worker(settings: Settings, index: int) -> int:
    """SIGKILL one worker and the executors it started, as a lost machine would (fault tests)."""
    info = recorded(settings)
    if info is None or index >= len(info.worker_pids):
        raise SigflowError(f"no worker {index} in a running cluster")
    pid = info.worker_pids[index]
    os.killpg(pid, signal.SIGKILL)  # the worker's session holds its executors too
    if not wait_until(lambda: not info.runs(pid, WORKER_CLASS), timeout_s=30, every_s=0.05):
        raise SigflowError(f"worker {index} (pid {pid}) outlived SIGKILL for 30 s", "check the host: a process in D state")
    return pid


def _terminate(info: ClusterInfo, pid: int, main: str, timeout_s: float) -> None:
    if not info.runs(pid, main):
        return
    os.killpg(pid, signal.SIGTERM)  # the daemon and its executors (its own session)
    if not wait_until(lambda: not info.runs(pid, main), timeout_s=timeout_s, every_s=0.1):
        os.killpg(pid, signal.SIGKILL)
    try:
        os.waitpid(pid, os.WNOHANG)  # reap it if this process started it
    except ChildProcessError:
        pass


def describe(settings: Settings) -> list[str]:
    """``sigflow cluster status``: the master, each worker, running and finished applications."""
    info = recorded(settings)
    if info is None:
        return ["no Spark cluster is running (start one with `sigflow cluster start`)"]
    state = master_state(info.ui_url)
    lines = [f"master {info.master_url} ({state.get('status', '?')}), UI {info.ui_url}"]
    for worker in state["workers"]:
        lines.append(f"  worker {worker['host']}:{worker['port']} {worker['state']}: "
                     f"{worker['coresused']}/{worker['cores']} cores, "
                     f"{worker['memoryused']}/{worker['memory']} MiB used")
    for kind in ("activeapps", "completedapps"):
        for app in state.get(kind, []):
            lines.append(f"  {'running' if kind == 'activeapps' else 'finished'} application "
                         f"{app['name']} ({app['id']}): {app['cores']} cores, {app['state']}")
    return lines
