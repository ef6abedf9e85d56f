"""A recorded pid is the recorded process only while it runs the same program and was started
at the recorded time: a pid reused by another process is never taken for the broker or a
cluster daemon."""

import json
import subprocess
import sys

from spark_jobs.config import load_settings
from spark_jobs.runtime.kafka import address
from spark_jobs.runtime.processes import is_recorded_process, start_time

MARKER = address.MAIN_CLASS  # what the broker's JVM runs


def _stand_in() -> subprocess.Popen:
    """A process whose command line names the broker's main class, as a broker's does."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", MARKER])


def test_a_process_is_known_by_pid_start_time_and_program():
    process = _stand_in()
    try:
        started = start_time(process.pid)
        assert is_recorded_process(process.pid, started, MARKER)
        assert is_recorded_process(process.pid, None, MARKER)  # a record made before start times were kept
        assert not is_recorded_process(process.pid, started - 3600, MARKER)  # the pid was reused since
        assert not is_recorded_process(process.pid, started, "org.apache.spark.deploy.master.Master")
    finally:
        process.kill()
        process.wait()
    assert not is_recorded_process(process.pid, started, MARKER)


def test_a_broker_record_whose_pid_now_belongs_to_another_process_is_no_running_broker(tmp_path):
    s = load_settings(env={}, overrides={"data_dir": str(tmp_path)})
    s.broker_dir.mkdir(parents=True)
    process = _stand_in()
    try:
        record = {"pid": process.pid, "bootstrap_servers": "127.0.0.1:9", "log_file": "kafka.log"}
        address.state_file(s).write_text(json.dumps({**record, "process_started": start_time(process.pid) - 60}))
        assert address.status(s) is None
        address.state_file(s).write_text(json.dumps({**record, "process_started": start_time(process.pid)}))
        assert address.status(s).pid == process.pid
    finally:
        process.kill()
        process.wait()
