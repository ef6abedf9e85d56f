import os
import signal
import subprocess

from spark_jobs import broker
from spark_jobs.config import load_settings
from tests.helpers import sigflow


def test_start_status_stop_manage_only_the_recorded_broker(tmp_path):
    s = load_settings(env={}, overrides={"data_dir": str(tmp_path), "broker_port": 0})
    bystander = subprocess.Popen(["sleep", "60"])  # some other process must survive
    try:
        info = broker.start(s)
        assert broker.start(s) == info  # idempotent
        assert broker.status(s).bootstrap_servers == info.bootstrap_servers
        assert broker.bootstrap_servers(s) == info.bootstrap_servers
        assert broker.stop(s) is True
        assert broker.status(s) is None and broker.stop(s) is False
        assert bystander.poll() is None
    finally:
        bystander.send_signal(signal.SIGKILL)
        bystander.wait()


def test_cli_broker_lifecycle(tmp_path):
    env = {"SIGFLOW_DATA_DIR": str(tmp_path), "SIGFLOW_BROKER_PORT": "0"}
    assert sigflow(None, "broker", "status", extra_env=env).returncode == 1
    started = sigflow(None, "broker", "start", extra_env=env)
    assert started.returncode == 0 and "broker running at 127.0.0.1:" in started.stdout
    assert sigflow(None, "broker", "status", extra_env=env).returncode == 0
    assert "broker stopped" in sigflow(None, "broker", "stop", extra_env=env).stdout
    assert not any(p for p in os.listdir(tmp_path / "broker") if p == "broker.json")
