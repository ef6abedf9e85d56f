"""The SQL endpoint on this machine: `sigflow sql serve` in a process of its own, started once and
kept across CLI runs like the broker, stopped by its recorded pid (``<data_dir>/sql/sql.json``),
and the token its clients present (``sql_token_file``, default ``<data_dir>/sql/token``).
"""

from __future__ import annotations

import json
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.config import Settings
from spark_jobs.errors import SigflowError
from spark_jobs.local import recorded
from spark_jobs.local.broker import port_open
from spark_jobs.runtime.catalog import sql_address
from spark_jobs.runtime.private_files import private_dir, write_private
from spark_jobs.runtime.processes import is_recorded_process, start_time

COMMAND = ("-m", "spark_jobs.cli", "sql", "serve")
MARK = "serve"  # an argument of COMMAND: a recorded pid that no longer runs it is not the endpoint


@dataclass(frozen=True)
class EndpointInfo:
    pid: int
    address: str
    log_file: str
    process_started: float | None = None

    @property
    def alive(self) -> bool:
        return is_recorded_process(self.pid, self.process_started, MARK)


def sql_dir(settings: Settings) -> Path:
    return Path(settings.data_dir) / "sql"


def token_file(settings: Settings) -> Path:
    return Path(settings.operations.sql_token_file or sql_dir(settings) / "token")


def ensure_token(settings: Settings) -> str:
    """The clients' token, made (random, 0600) when its file is missing; a file that others may
    read is refused, as a password file would be."""
    path = token_file(settings)
    if not path.exists():
        private_dir(path.parent)
        write_private(path, secrets.token_urlsafe(32) + "\n")
    if path.stat().st_mode & 0o077:
        raise SigflowError(f"{path} may be read by other users", f"`chmod 600 {path}`")
    token = path.read_text().strip()
    if len(token) < 16:
        raise SigflowError(f"{path} holds a token of {len(token)} characters", "write one of at least 16, or delete it")
    return token


def _state_file(settings: Settings) -> Path:
    return sql_dir(settings) / "sql.json"


def status(settings: Settings) -> EndpointInfo | None:
    path = _state_file(settings)
    if not path.exists():
        return None
    info = EndpointInfo(**json.loads(path.read_text()))
    return info if info.alive else None


def start(settings: Settings, timeout_s: float = 180.0) -> EndpointInfo:
    """Start `sigflow sql serve` in the background (idempotent) and wait until it serves."""
    running = status(settings)
    if running:
        return running
    ensure_token(settings)
    host, port = settings.operations.sql_host, settings.operations.sql_port
    if port_open(host, port):
        raise SigflowError(f"port {port} on {host} is already taken by another process",
                           "set SIGFLOW_SQL_PORT to a free port")
    private_dir(sql_dir(settings))
    log_file = sql_dir(settings) / "sql.log"
    config = ["--config", settings.source_file] if settings.source_file else []
    proc = recorded.launch([sys.executable, *COMMAND[:2], *config, *COMMAND[2:]], log_file,
                           lambda: port_open(host, port), timeout_s, f"the SQL endpoint on {host}:{port}")
    info = EndpointInfo(proc.pid, sql_address(settings), str(log_file), start_time(proc.pid))
    _state_file(settings).write_text(json.dumps(info.__dict__))
    return info


def stop(settings: Settings, timeout_s: float = 60.0) -> bool:
    return recorded.stop(status(settings), _state_file(settings), timeout_s)
