"""A recorded pid is the recorded process only while it runs the same program and was started
at the recorded time: a pid reused by another process is never taken for the broker or a
cluster daemon."""

import itertools
import json
import os
import socket
import subprocess
import sys
import time

import psutil

from spark_jobs.config import load_settings
from spark_jobs.runtime.checkpoint.lease import Holder
from spark_jobs.runtime.kafka import address
from spark_jobs.runtime.processes import is_recorded_process, start_time

MARKER = address.MAIN_CLASS  # what the broker's JVM runs


def _stand_in() -> subprocess.Popen:
    """A process whose command line names the broker's main class, as a broker's does; back
    once it runs (its first line printed)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)", MARKER],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "up\n"
    return process


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


def test_a_wall_clock_step_does_not_unmake_a_recorded_process(monkeypatch):
    """The kernel derives its boot time from the wall clock, so psutil's epoch start times
    move when the clock is stepped; a record must still know its live process then."""
    import psutil._pslinux

    process = _stand_in()
    try:
        recorded = start_time(process.pid)
        ours = Holder("run-1", "ingest", socket.gethostname(), os.getpid(), start_time(os.getpid()), time.time(), 60.0)
        # stepped by 5 s, and jittering by a second from one read to the next
        readings = itertools.cycle([psutil._pslinux.boot_time() + 5, psutil._pslinux.boot_time() + 6])
        monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: next(readings))
        assert is_recorded_process(process.pid, recorded, MARKER)
        assert ours.process() is not None and ours.alive()  # a lease's holder is still itself
    finally:
        process.kill()
        process.wait()


def test_a_lease_written_with_an_epoch_start_time_still_names_its_process():
    epoch_form = psutil.Process().create_time()  # how earlier versions wrote it
    holder = Holder("run-1", "ingest", socket.gethostname(), os.getpid(), epoch_form, time.time(), 60.0)
    assert holder.process() is not None
    assert Holder("run-1", "ingest", socket.gethostname(), os.getpid(), epoch_form - 60, time.time(), 60.0).process() is None
