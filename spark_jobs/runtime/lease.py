"""One writer per checkpoint: a lease file in the checkpoint that a run holds while it runs.

Two runs of one job on one checkpoint would both write its batches. The lease names its
holder (host, pid and the process's start time, so a reused pid is not mistaken for it);
a second run, on any host that shares the checkpoint storage, is refused while the holder
lives. The holder renews it from a heartbeat thread; one that stops renewing (killed, or
cut off from the storage) loses it after ``lease_ttl``, and at once when a run on its own
host finds its process gone. Before each batch's writes the holder checks it still holds
the lease, so a driver that lost it stops instead of writing beside its successor.

Creation is atomic on local and HDFS-like storage (a hard link fails if the file exists);
on object storage, where pyarrow has no conditional put, a run reads the lease back after
writing it, and the per-batch check stops the loser of a race at its first batch.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass

import psutil
from pyarrow import fs as pafs

from spark_jobs.errors import JobAlreadyRunning, LeaseLost
from spark_jobs.runtime.checkpoint import Checkpoint

LEASE_FILE = "sigflow.lease"


@dataclass(frozen=True)
class Holder:
    owner: str  # one run's id
    job: str
    host: str
    pid: int
    process_started: float  # the process's start time (psutil), which a reused pid lacks
    renewed: float  # epoch seconds
    ttl_s: float

    def on_this_host(self) -> bool:
        return self.host == socket.gethostname()

    def process(self) -> psutil.Process | None:
        """The holding process, when it runs on this host and is the one that took the lease."""
        if not self.on_this_host():
            return None
        try:
            process = psutil.Process(self.pid)
            return process if abs(process.create_time() - self.process_started) < 1.0 else None
        except psutil.Error:
            return None

    def alive(self, now: float | None = None) -> bool:
        """On this host: its process exists. Elsewhere: it renewed within the lease's time."""
        if self.on_this_host():
            return self.process() is not None
        return (now or time.time()) <= self.renewed + self.ttl_s

    def describe(self) -> str:
        age = time.time() - self.renewed
        return f"{self.job} run {self.owner} on {self.host} (pid {self.pid}), renewed {age:.0f} s ago"


class Lease:
    def __init__(self, checkpoint: Checkpoint, job: str, ttl_s: float):
        self.checkpoint, self.job, self.ttl_s = checkpoint, job, ttl_s
        self.fs, self.path = checkpoint.fs, f"{checkpoint.path}/{LEASE_FILE}"
        self.owner = uuid.uuid4().hex[:12]
        self._heartbeat: threading.Thread | None = None
        self._stop = threading.Event()

    def holder(self) -> Holder | None:
        try:
            with self.fs.open_input_stream(self.path) as stream:
                return Holder(**json.loads(stream.read().decode()))
        except (FileNotFoundError, OSError, ValueError, TypeError):
            return None

    def _mine(self) -> Holder:
        return Holder(self.owner, self.job, socket.gethostname(), os.getpid(),
                      psutil.Process().create_time(), time.time(), self.ttl_s)

    def acquire(self) -> None:
        """Take the lease, or raise JobAlreadyRunning naming the live holder."""
        self.fs.create_dir(self.checkpoint.path, recursive=True)
        current = self.holder()
        if current is not None and current.owner == self.owner:
            return
        if current is not None and current.alive():
            raise _refusal(current, self.checkpoint.uri)
        if current is None and isinstance(self.fs, pafs.LocalFileSystem):
            if not self._create_exclusively():
                return self.acquire()  # another run created it just now: judge that one
        else:
            self._write()  # a dead holder's lease is taken over
        taken = self.holder()
        if taken is None or taken.owner != self.owner:
            raise _refusal(taken, self.checkpoint.uri) if taken else LeaseLost(
                f"the lease at {self.path} vanished while {self.job} took it", "run the job again")
        self._start_heartbeat()

    def _create_exclusively(self) -> bool:
        aside = self._write(aside=True)
        try:
            os.link(aside, self.path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(aside)

    def _write(self, aside: bool = False) -> str:
        target = f"{self.path}.{self.owner}.tmp" if aside else self.path
        with self.fs.open_output_stream(target) as out:
            out.write(json.dumps(asdict(self._mine())).encode())
        return target

    def check(self) -> None:
        """Raise LeaseLost unless this run still holds the lease (before each batch's writes)."""
        current = self.holder()
        if current is None or current.owner != self.owner:
            taker = f": {current.describe()} holds it" if current else ""
            raise LeaseLost(
                f"{self.job} lost its lease on {self.checkpoint.uri}{taker}; this run stopped before "
                "writing its batch", "nothing to do if the other run is the one you want; otherwise stop "
                "it and rerun this job (docs/runbooks/job-crashed.md)")

    def renew(self) -> None:
        self.check()
        self._write()

    def release(self) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(5)
        current = self.holder()
        if current is not None and current.owner == self.owner:
            self.fs.delete_file(self.path)

    def _start_heartbeat(self) -> None:
        def beat() -> None:
            while not self._stop.wait(self.ttl_s / 4):
                try:
                    self.renew()
                except LeaseLost:
                    return  # the next batch's check stops the run
                except OSError:
                    continue  # storage unreachable for now: the lease may lapse, checked per batch

        self._heartbeat = threading.Thread(target=beat, name=f"sigflow-lease-{self.job}", daemon=True)
        self._heartbeat.start()


def _refusal(holder: Holder, uri: str) -> JobAlreadyRunning:
    where = "this host" if holder.on_this_host() else holder.host
    return JobAlreadyRunning(
        f"{holder.job} is already running on {where}: {holder.describe()}; a second run on its "
        f"checkpoint ({uri}) would write its batches twice",
        f"let it finish, or stop it with `sigflow stop {holder.job}` on {where}; a lease not renewed "
        f"for {holder.ttl_s:.0f} s (lease_ttl) lapses by itself",
    )
