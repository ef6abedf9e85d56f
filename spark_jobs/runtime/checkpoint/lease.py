"""One writer per checkpoint: a lease beside the checkpoint (``<checkpoint>.lease/``) that a
run, or a restart being applied, holds while it works.

Two runs of one job on one checkpoint would both write its batches. The lease names its
holder (host, pid and the process's start time, so a reused pid is not mistaken for it, and
what it is doing: a run, or a restart being applied); a second taker, on any host that
shares the checkpoint storage, is refused while the holder lives. The holder renews it
from a heartbeat thread; one that stops renewing (killed, stopped, cut off from the
storage) loses it after ``lease_ttl``, and at once when a taker on its own host finds its
process gone. Before each batch's writes, and before each table's commit, the holder checks
it still holds the lease, so a driver that lost it stops instead of writing beside its
successor.

Each lease has a generation, in its file's name (``sigflow.lease``, then
``sigflow.lease.1``, ``.2`` ...); the highest one present is the lease, and generations only
grow: a release marks its file released and leaves it, so the next taker goes on from it and
a lower generation's file, whenever it appears (a renewal that stalled past a takeover and
wrote late), is never the lease again. A taker creates the next generation's file
exclusively (a hard link locally, a conditional put on S3) and then finds it the highest
present: of two takers only one can, so a takeover is atomic. The holder renews only its own
generation's file, checking before and after that no higher one exists: once a taker has
made one, the old holder's every check fails, whatever its late writes leave behind. A
holder on this host that is alive but has stopped renewing past its time (a stopped or hung
driver) is killed by the taker before the takeover, so it can never write again; one on
another host stops at its next check.

A lease file the storage fails to read (a timeout, a 503) is read again for a while, never
taken as no holder: a holder would stop a healthy run, a taker would take a live lease.

How old a renewal is: on this host, on the clock that counts from boot (``CLOCK_BOOTTIME``),
which a step of the wall clock does not move; for a holder on another host, on the wall
clock, allowing ``CLOCK_SKEW_S`` of difference between the two hosts' clocks.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import signal
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
import tenacity
from pyarrow import fs as pafs
from pydantic import TypeAdapter

from spark_jobs.config import object_store
from spark_jobs.errors import JobAlreadyRunning, LeaseLost
from spark_jobs.runtime.checkpoint import storage
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.processes import start_time, started_as_recorded

log = logging.getLogger("sigflow.lease")
LEASE_FILE = "sigflow.lease"
STOP_FILE = "stop.requested"  # beside the lease: its holder is asked to stop (``request_stop``)
_GENERATION = re.compile(re.escape(LEASE_FILE) + r"(?:\.(\d+))?")
RUN = "run"
# sigflow reconcile's own lease, beside the job's (``<checkpoint>.reconcile.lease/``): one
# reconcile of a job at a time, and a rewind or recover holding the job's lease refuses while
# one is taken (each takes its own first, then looks at the other's: one of two always sees
# the other)
RECONCILE = "reconcile"
# How far apart two hosts' wall clocks may be (NTP keeps them within milliseconds): a holder
# on another host keeps its lease this much past lease_ttl.
CLOCK_SKEW_S = 10.0
SPARK_SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"  # the JVM spark-submit starts


def this_machine() -> str:
    """The host name, with which kernel boot and process namespace this process runs in: two
    containers with one host name (each its own pid namespace) differ here, and a pid means
    something only within one of them."""
    return f"{socket.gethostname()}/{_boot_and_namespace()}"


@functools.cache
def _boot_and_namespace() -> str:
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:  # not Linux: the host name alone tells
        return ""


def since_boot() -> float:
    """Seconds on the clock that counts from boot, as every process on this host reads it."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


@dataclass(frozen=True)
class Holder:
    owner: str  # one run's id
    job: str
    host: str
    pid: int
    process_started: float  # the process's start time (runtime/processes.py), which a reused pid lacks
    renewed: float  # epoch seconds
    ttl_s: float
    purpose: str = RUN  # or the restart being applied: "rewind", "recover", "resume"; or RECONCILE
    renewed_since_boot: float | None = None  # since_boot() at the renewal; None from older versions
    released: bool = False  # let go by its holder: the file stays, so generations only grow
    generation: int = 0  # from the file's name, not its content
    machine: str | None = None  # this_machine() of the holder; None from older versions
    # the holder runs beside other jobs in one application (`sigflow pipeline`): a signal to
    # its process would stop them all, so it is asked to stop by request (``request_stop``)
    shared: bool = False

    def on_this_host(self) -> bool:
        """Whether the holder's pid and boot clock mean what they do here: the same kernel
        boot and pid namespace (a lease from an older version: the same host name)."""
        if self.machine is not None:
            return self.machine == this_machine()
        return self.host == socket.gethostname()

    def process(self) -> psutil.Process | None:
        """The holding process, when it runs on this host and is the one that took the lease."""
        if not self.on_this_host():
            return None
        try:
            process = psutil.Process(self.pid)
            return process if started_as_recorded(self.pid, self.process_started) else None
        except psutil.Error:
            return None

    def age(self) -> float:
        """Seconds since the last renewal: on this host from boot-relative times, which a
        wall-clock step does not move; else by the wall clocks of two hosts."""
        if self.on_this_host() and self.renewed_since_boot is not None:
            return since_boot() - self.renewed_since_boot
        return time.time() - self.renewed

    def renewed_in_time(self) -> bool:
        allowance = 0.0 if self.on_this_host() and self.renewed_since_boot is not None else CLOCK_SKEW_S
        return self.age() <= self.ttl_s + allowance

    def alive(self) -> bool:
        """Not released, renewed within the lease's time and, on this host, its process
        still exists."""
        if self.released:
            return False
        if self.on_this_host() and self.process() is None:
            return False
        return self.renewed_in_time()

    def left_in_application(self) -> bool:
        """Let go by one job of an application still running on this host, which starts the
        job again (runtime/launch.py): after a failure's backoff, or once the restart a
        failure needs has been applied."""
        return self.released and self.shared and self.purpose == RUN and self.process() is not None

    def describe(self) -> str:
        age = self.age()
        doing = f"{self.job} run" if self.purpose == RUN else f"{self.purpose} of {self.job}"
        return f"{doing} {self.owner} on {self.host} (pid {self.pid}), renewed {age:.0f} s ago"


class Lease:
    def __init__(self, checkpoint: Checkpoint, job: str, ttl_s: float, purpose: str = RUN, shared: bool = False):
        if not ttl_s > 0:
            raise ValueError(f"a lease's ttl must be above 0 s, not {ttl_s}")
        self.checkpoint, self.job, self.ttl_s, self.purpose, self.shared = checkpoint, job, ttl_s, purpose, shared
        # beside the checkpoint, not in it: a recover moves the checkpoint aside while it holds this
        self.fs = checkpoint.fs
        self.folder = f"{checkpoint.path}.reconcile.lease" if purpose == RECONCILE else checkpoint.beside
        self.owner = uuid.uuid4().hex[:12]
        self.generation: int | None = None  # the one this lease took
        # the holder this lease was taken from without its release (crashed, stalled, cut
        # off): its writes may still be under way (runtime/delta/fence.py)
        self.taken_over: Holder | None = None
        self._heartbeat: threading.Thread | None = None
        self._stop = threading.Event()

    # ---- reading ---------------------------------------------------------------------------
    def _path(self, generation: int) -> str:
        return f"{self.folder}/{LEASE_FILE}" + (f".{generation}" if generation else "")

    def _generations(self) -> list[int]:
        selector = pafs.FileSelector(self.folder, allow_not_found=True)
        found = (_GENERATION.fullmatch(info.base_name) for info in self.fs.get_file_info(selector))
        return sorted(int(match.group(1) or 0) for match in found if match)

    def _read(self, generation: int) -> Holder | None:
        """The holder in ``generation``'s file; None when the file is gone or holds no holder.
        Storage that keeps failing raises OSError: the file may well be there, and its holder
        alive."""
        raw = storage.read_bytes(self.fs, self._path(generation))
        try:
            return None if raw is None else _HOLDER.validate_python({**json.loads(raw.decode()), "generation": generation})
        except (ValueError, TypeError):  # pydantic's errors are ValueErrors
            return None

    def latest_generation(self) -> int | None:
        """The highest generation taken: every taking makes a new one, so a change says that
        some run or restart has held the lease since."""
        return max(storage.patiently()(self._generations), default=None)

    def holder(self) -> Holder | None:
        """Who holds the lease: the highest generation's holder, or None when there is none.
        Storage that fails for a moment is asked again; OSError once it keeps failing."""
        generations = storage.patiently()(self._generations)
        return self._read(generations[-1]) if generations else None

    # ---- taking ----------------------------------------------------------------------------
    def _mine(self, released: bool = False) -> Holder:
        return Holder(self.owner, self.job, socket.gethostname(), os.getpid(),
                      start_time(os.getpid()), time.time(), self.ttl_s, self.purpose, since_boot(), released,
                      machine=this_machine(), shared=self.shared)

    def _content(self, released: bool = False) -> bytes:
        fields = asdict(self._mine(released))
        fields.pop("generation")
        return json.dumps(fields).encode()

    def acquire(self) -> None:
        """Take the lease, or raise JobAlreadyRunning naming the live holder."""
        self.fs.create_dir(self.folder, recursive=True)
        while True:
            generations = storage.patiently()(self._generations)
            current = self._settled(generations[-1]) if generations else None
            if current is not None and current.owner == self.owner and not current.released:
                return
            if current is not None and current.alive():
                raise _refusal(current, self.checkpoint.uri)
            if current is not None and not current.released:
                _fence(current)
            wanted = generations[-1] + 1 if generations else 0
            if self._create_exclusively(wanted):
                if self._still_highest(wanted):
                    break
                continue  # created below another taker's generation: judge that one
            # else another taker made that generation first: judge it
        self.generation = wanted
        self.taken_over = current if current is not None and not current.released else None
        for older in (g for g in generations if g < wanted):
            try:
                self.fs.delete_file(self._path(older))
            except (FileNotFoundError, OSError):
                pass
        self._start_heartbeat()

    def _still_highest(self, generation: int) -> bool:
        """Whether ``generation``, just created, is the highest one present. A listing taken on
        a local disk while another taker links its generation and removes the one below may
        show neither (readdir need not return entries added or removed while it reads), and
        this taker then creates a generation the other has already passed: it is not the lease,
        and is removed again. (This listing may miss entries too, but not one above: no taker
        goes past a live generation.)"""
        if max(storage.patiently()(self._generations), default=generation) <= generation:
            return True
        try:
            self.fs.delete_file(self._path(generation))
        except (FileNotFoundError, OSError):
            pass
        return False

    def _settled(self, generation: int) -> Holder | None:
        """The holder of ``generation``, read again for a moment when the file holds no holder
        (a store without atomic writes, mid-write); None for a file that goes on holding none,
        which is taken over. Storage that keeps failing raises OSError (storage.py)."""
        reading = tenacity.Retrying(retry=tenacity.retry_if_result(lambda holder: holder is None),
                                    wait=tenacity.wait_fixed(0.1), stop=tenacity.stop_after_attempt(5),
                                    retry_error_callback=lambda state: None)
        return reading(self._read, generation)

    def _create_exclusively(self, generation: int) -> bool:
        """Write this holder as ``generation`` only if nothing is there: True when it did."""
        path = self._path(generation)
        if isinstance(self.fs, pafs.LocalFileSystem):
            aside = self._written_aside(path)
            try:
                os.link(aside, path)
                return True
            except FileExistsError:
                return False
            finally:
                os.unlink(aside)
        if isinstance(self.fs, pafs.S3FileSystem):
            return _s3_put_if_absent(path, self._content())
        # no conditional create here: write, and let the read back judge a race
        if self.fs.get_file_info(path).type != pafs.FileType.NotFound:
            return False
        self._write(path)
        taken = self._read(generation)
        return taken is not None and taken.owner == self.owner

    def _written_aside(self, path: str, released: bool = False) -> str:
        """This holder written beside ``path`` (local disk), to be linked or renamed into place."""
        aside = f"{path}.{self.owner}.tmp"
        with open(aside, "wb") as out:
            out.write(self._content(released))
        return aside

    def _write(self, path: str, released: bool = False) -> None:
        """Replace the file whole: a reader never sees a renewal half written (a rename on a
        local disk; a put on object storage is whole by itself)."""
        if isinstance(self.fs, pafs.LocalFileSystem):
            os.replace(self._written_aside(path, released), path)
            return
        with self.fs.open_output_stream(path) as out:
            out.write(self._content(released))

    # ---- holding ---------------------------------------------------------------------------
    def check(self) -> None:
        """Raise LeaseLost unless this run still holds the lease (before each batch's writes,
        and before each table's commit). A run that cannot read its lease does not write either."""
        try:
            self._check_held()
        except OSError as exc:
            raise LeaseLost(
                f"{self.job} could not read its lease on {self.checkpoint.uri} ({exc}); this run stopped "
                "before writing its batch", "once the storage answers again, rerun this job: it goes on "
                "from its checkpoint") from exc

    def _check_held(self) -> None:
        """LeaseLost when another holds the lease or none does; OSError when storage keeps failing."""
        current = self.holder()
        if current is None or current.owner != self.owner or current.released:
            taker = f": {current.describe()} holds it" if current else ""
            raise LeaseLost(
                f"{self.job} lost its lease on {self.checkpoint.uri}{taker}; this run stopped before "
                "writing its batch", "nothing to do if the other run is the one you want; otherwise stop "
                "it and rerun this job (docs/runbooks/job-crashed.md)")

    def renew(self) -> None:
        """Renew this generation's file only while no taker has made a higher one, and check
        again after the write: a write that stalled past a takeover lands on a generation
        below the taker's, which is never the lease again (generations only grow)."""
        self._check_held()
        self._write(self._path(self.generation or 0))
        self._check_held()

    def release(self) -> None:
        """Stop renewing and mark this generation released; its file stays, so the next
        taker makes the generation after it."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(5)
        try:
            current = self.holder()
            if current is not None and current.owner == self.owner and not current.released:
                self._write(self._path(current.generation), released=True)
        except OSError as exc:  # not renewed any more, it lapses after lease_ttl
            log.warning("%s: could not mark its lease released (%s); it lapses after %.0f s", self.job, exc, self.ttl_s)

    def refuse_if_run_elsewhere(self) -> None:
        """Raise JobAlreadyRunning, as ``acquire`` would, while a live run of the job holds the
        lease; a restart being applied to it (which ends by itself) is left to ``acquire``."""
        current = self.holder()
        if current is not None and current.purpose == RUN and current.owner != self.owner and current.alive():
            raise _refusal(current, self.checkpoint.uri)

    # ---- asking a holder in a shared application to stop -----------------------------------
    def request_stop(self) -> None:
        """Ask the run that holds this lease to stop after its batch in flight (a run in a
        shared application, whose process runs other jobs too): it looks every few seconds."""
        storage.write_whole(self.fs, f"{self.folder}/{STOP_FILE}", b"stop after the batch in flight\n")

    def stop_requested(self) -> bool:
        return storage.read_bytes(self.fs, f"{self.folder}/{STOP_FILE}") is not None

    def clear_stop_request(self) -> None:
        try:
            self.fs.delete_file(f"{self.folder}/{STOP_FILE}")
        except (FileNotFoundError, OSError):
            pass

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def _start_heartbeat(self) -> None:
        def beat() -> None:
            while not self._stop.wait(self.ttl_s / 4):
                try:
                    self.renew()
                except LeaseLost:
                    return  # the next check stops the run
                except OSError:
                    continue  # storage unreachable for now: the lease may lapse, checked per batch

        self._heartbeat = threading.Thread(target=beat, name=f"sigflow-lease-{self.job}", daemon=True)
        self._heartbeat.start()


# a lease file's fields checked for their types as they are read: a file another version or
# a hand wrote wrongly is unreadable (and taken over), never a TypeError later
_HOLDER = TypeAdapter(Holder)


def _fence(stale: Holder) -> None:
    """A holder on this host whose process lives on but stopped renewing (stopped, hung) is
    killed before its lease is taken over, with everything it started (its driver's JVM,
    which may be in the middle of a commit): woken later, it would write beside its successor."""
    process = stale.process()
    if process is None or process.pid == os.getpid():  # gone, or this process's own lapsed lease
        return
    try:
        # under spark-submit the driver's JVM is the Python process's parent, not its child
        launcher = process.parent()
        root = launcher if launcher is not None and _is_spark_submit(launcher) else process
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for member in tree:
        try:
            member.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(tree, timeout=10)


def _is_spark_submit(process: psutil.Process) -> bool:
    try:
        return SPARK_SUBMIT_CLASS in process.cmdline()
    except psutil.Error:
        return False


def _s3_put_if_absent(path: str, data: bytes) -> bool:
    """S3's conditional put (If-None-Match: *), which pyarrow does not offer: True when it
    created the object, False when one was there."""
    import boto3

    bucket, _, key = path.partition("/")
    store = object_store()
    client = boto3.client("s3", endpoint_url=store.endpoint_url or None, region_name=store.region or None)
    try:
        client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        return True
    except client.exceptions.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
            return False
        raise


def _refusal(holder: Holder, uri: str) -> JobAlreadyRunning:
    where = "this host" if holder.on_this_host() else holder.host
    if holder.purpose == RECONCILE:
        return JobAlreadyRunning(f"{holder.job}: a reconcile is running on {where}: {holder.describe()}",
                                 "let it finish: the next reconcile goes on from what it recorded")
    if holder.purpose != RUN:
        return JobAlreadyRunning(
            f"{holder.job}: a {holder.purpose} is being applied to its checkpoint ({uri}) on {where}: "
            f"{holder.describe()}", "run the job once the restart is applied (its plan then says what comes next)")
    return JobAlreadyRunning(
        f"{holder.job} is already running on {where}: {holder.describe()}; a second run on its "
        f"checkpoint ({uri}) would write its batches twice",
        f"let it finish, or stop it with `sigflow stop {holder.job}` on {where}; a lease not renewed "
        f"for {holder.ttl_s:.0f} s (lease_ttl) lapses by itself",
    )
