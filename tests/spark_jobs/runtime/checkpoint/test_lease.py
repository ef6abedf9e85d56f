"""One writer per checkpoint: the lease a run holds, refused to a second run while its holder
lives, taken over once the holder is gone (killed, a reused pid, or silent past lease_ttl)."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from spark_jobs.errors import JobAlreadyRunning, LeaseLost
from spark_jobs.local.simulate import generate_events
from spark_jobs.runtime.checkpoint.directory import Checkpoint
from spark_jobs.runtime.checkpoint.lease import CLOCK_SKEW_S, LEASE_FILE, Lease
from tests.helpers import StorageDown, produce, run_job, table, wait_for


def _lease(tmp_path, ttl_s=60.0):
    return Lease(Checkpoint(str(tmp_path / "cp")), "dedup", ttl_s)


def _forge(tmp_path, **fields):
    """A lease file as another run left it."""
    holder = {"owner": "other", "job": "dedup", "host": socket.gethostname(), "pid": os.getpid(),
              "process_started": 0.0, "renewed": time.time(), "ttl_s": 60.0, **fields}
    (tmp_path / "cp.lease").mkdir(exist_ok=True)
    (tmp_path / "cp.lease" / LEASE_FILE).write_text(json.dumps(holder))


def _holding_process(tmp_path, ttl_s: float) -> subprocess.Popen:
    """Another process that takes the lease and then only sleeps (its heartbeat renews it)."""
    code = ("import sys, time; from spark_jobs.runtime.checkpoint.directory import Checkpoint; "
            "from spark_jobs.runtime.checkpoint.lease import Lease; "
            f"Lease(Checkpoint({str(tmp_path / 'cp')!r}), 'dedup', {ttl_s}).acquire(); print('held', flush=True); "
            "time.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def take_at_once(takers: list[Lease]) -> list[str]:
    """Every taker acquires at the same moment, each from a thread: "took" or "refused" each."""
    import threading

    start, outcomes = threading.Barrier(len(takers)), []

    def take(lease):
        start.wait()
        try:
            lease.acquire()
            outcomes.append("took")
        except JobAlreadyRunning:
            outcomes.append("refused")

    threads = [threading.Thread(target=take, args=(lease,)) for lease in takers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(outcomes)


def test_a_second_run_is_refused_while_the_first_holds_the_lease(tmp_path):
    first, second = _lease(tmp_path), _lease(tmp_path)
    first.acquire()
    with pytest.raises(JobAlreadyRunning, match=f"dedup is already running on this host.*pid {os.getpid()}") as err:
        second.acquire()
    assert "sigflow stop dedup" in err.value.hint
    first.release()
    second.acquire()
    assert second.holder().owner == second.owner
    second.release()
    assert second.holder().released and not second.holder().alive()  # marked, left: generations only grow
    third = _lease(tmp_path)
    third.acquire()
    assert third.generation == second.generation + 1
    third.release()


def test_the_lease_of_a_killed_run_is_taken_over_at_once(tmp_path):
    holder = _holding_process(tmp_path, 60)
    try:
        with pytest.raises(JobAlreadyRunning, match=f"pid {holder.pid}"):
            _lease(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
    successor = _lease(tmp_path)
    successor.acquire()  # SIGKILL left the file: its process is gone, so the lease is free
    assert successor.holder().pid == os.getpid()
    successor.release()


def test_a_reused_pid_does_not_hold_the_lease(tmp_path):
    _forge(tmp_path, pid=os.getpid(), process_started=12345.0)  # our pid, another process's start
    lease = _lease(tmp_path)
    lease.acquire()
    assert lease.holder().owner == lease.owner
    lease.release()


def test_a_holder_on_another_host_keeps_the_lease_until_it_stops_renewing(tmp_path):
    _forge(tmp_path, host="spark-driver-7", renewed=time.time())
    with pytest.raises(JobAlreadyRunning, match="running on spark-driver-7"):
        _lease(tmp_path).acquire()
    _forge(tmp_path, host="spark-driver-7", renewed=time.time() - 60 - CLOCK_SKEW_S + 1)
    with pytest.raises(JobAlreadyRunning, match="running on spark-driver-7"):  # its clock may be behind ours
        _lease(tmp_path).acquire()
    _forge(tmp_path, host="spark-driver-7", renewed=time.time() - 61 - CLOCK_SKEW_S)
    lease = _lease(tmp_path)
    lease.acquire()
    lease.release()


def test_a_run_whose_lease_was_taken_over_stops_before_writing(tmp_path):
    lease = _lease(tmp_path)
    lease.acquire()
    lease.check()
    _forge(tmp_path, host="spark-driver-7")  # a successor after this run stopped renewing
    with pytest.raises(LeaseLost, match="spark-driver-7"):
        lease.check()
    lease.release()
    assert json.loads((tmp_path / "cp.lease" / LEASE_FILE).read_text())["host"] == "spark-driver-7"


def test_of_several_takers_of_a_lapsed_lease_exactly_one_takes_it(tmp_path):
    """Takeover is a create-exclusive of the next generation: racing takers cannot both win."""
    _forge(tmp_path, host="spark-driver-7", renewed=time.time() - 61 - CLOCK_SKEW_S)
    takers = [_lease(tmp_path) for _ in range(8)]
    assert take_at_once(takers) == ["refused"] * 7 + ["took"]
    winner = next(lease for lease in takers if lease.generation is not None)
    assert Lease(Checkpoint(str(tmp_path / "cp")), "dedup", 60).holder().owner == winner.owner
    winner.release()


def test_a_taker_whose_listing_missed_the_generations_does_not_take_the_lease(tmp_path):
    """A directory listing taken while another taker links its generation and removes the
    one below may show neither (readdir does not promise entries added or removed while it
    reads): the late taker then creates the lowest generation, which is not the lease."""
    _forge(tmp_path, host="spark-driver-7", renewed=time.time() - 61 - CLOCK_SKEW_S)
    winner, late = _lease(tmp_path), _lease(tmp_path)
    winner.acquire()  # generation 1; generation 0 removed
    torn = [[]]  # the late taker's first listing shows nothing; later ones the folder as it is
    late._generations = lambda: torn.pop() if torn else Lease._generations(late)
    with pytest.raises(JobAlreadyRunning, match=f"pid {os.getpid()}"):
        late.acquire()
    assert late.generation is None
    assert winner.holder().owner == winner.owner
    assert sorted(path.name for path in (tmp_path / "cp.lease").iterdir()) == [f"{LEASE_FILE}.1"]
    winner.release()


def test_a_renewal_after_a_takeover_fails_and_leaves_the_takers_lease(tmp_path):
    """Renewal is a compare-and-swap on the generation: a holder that lapsed and wakes up
    cannot write its lease back over its successor's."""
    lapsed = _lease(tmp_path, ttl_s=600)
    lapsed.acquire()
    taker_file = tmp_path / "cp.lease" / f"{LEASE_FILE}.{lapsed.generation + 1}"
    taker_file.write_text(json.dumps({"owner": "successor", "job": "dedup", "host": "spark-driver-7", "pid": 1,
                                      "process_started": 0.0, "renewed": time.time(), "ttl_s": 60.0}))
    with pytest.raises(LeaseLost, match="spark-driver-7"):
        lapsed.renew()
    assert json.loads(taker_file.read_text())["owner"] == "successor"
    assert lapsed.holder().owner == "successor"
    lapsed.release()  # not its lease any more: left alone
    assert taker_file.exists()


def test_a_stopped_holder_on_this_host_is_fenced_when_its_lease_lapses(tmp_path):
    """A driver stopped (SIGSTOP, a hung JVM) keeps its process but stops renewing: past
    lease_ttl a taker kills it before taking over, so it can never wake up and write."""
    import signal

    holder = _holding_process(tmp_path, 2)
    try:
        holder.send_signal(signal.SIGSTOP)
        with pytest.raises(JobAlreadyRunning):
            _lease(tmp_path).acquire()  # within its time: still the holder
        time.sleep(2.5)
        assert psutil.Process(holder.pid).status() == psutil.STATUS_STOPPED
        successor = _lease(tmp_path)
        successor.acquire()
        assert not psutil.pid_exists(holder.pid)  # killed (and reaped: it is this test's child)
        assert successor.holder().owner == successor.owner
        successor.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


@pytest.mark.slow  # a driver JVM of its own, stopped and fenced
@pytest.mark.timeout(600)
def test_a_stopped_driver_past_its_lease_is_fenced_and_its_successor_writes_each_row_once(spark, settings):
    """A driver (its Python and its JVM) stopped mid-run, as a hung host or a long pause
    stops one: past lease_ttl a second run takes over and commits; woken, the first writes
    nothing. Every record lands in device_events_raw exactly once."""
    from collections import Counter

    from tests.helpers import REPO, cli_env

    records = generate_events(600, seed=41)
    s = settings.replace(max_offsets_per_trigger=100)  # several batches: one is likely in flight
    produce(s, records[:300])
    first = subprocess.Popen(
        [sys.executable, "-m", "spark_jobs.cli", "run", "ingest", "--processing-time", "1s"],
        env=cli_env(s, {"SIGFLOW_LEASE_TTL": "6 seconds"}), cwd=REPO,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    driver = [psutil.Process(first.pid)]
    try:
        wait_for(lambda: (Checkpoint(s.checkpoint_uri("ingest")).last_committed() or -1) >= 1, timeout_s=240,
                 watched=(first,), what="the first run's batch 1 committed")
        produce(s, records[300:])
        time.sleep(1.5)  # into the next batches
        driver += driver[0].children(recursive=True)
        for process in driver:
            process.suspend()  # SIGSTOP, the JVM too
        time.sleep(7)  # past lease_ttl: the lease lapses
        run_job(spark, s, "ingest")  # takes over: the stopped driver is killed first
        for process in driver:
            try:
                process.resume()  # SIGCONT: nothing left to wake
            except psutil.NoSuchProcess:
                pass
        # killed by the successor (which reaped it: psutil waits on the processes it kills)
        assert not [p for p in driver if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        run_job(spark, s, "ingest")  # anything left in Kafka
    finally:
        for process in driver:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
    raw = Counter(table(s, "device_events_raw")["value"])
    assert raw == Counter(r.value for r in records)


def test_a_lease_file_caught_half_written_is_read_again_not_taken_over(tmp_path):
    """A reader can meet a holder's file mid-write on storage without atomic writes: it reads
    again for a moment instead of taking a live holder's lease."""
    import threading

    (tmp_path / "cp.lease").mkdir(parents=True)
    (tmp_path / "cp.lease" / LEASE_FILE).write_text("")  # the holder is writing it
    writes = threading.Timer(0.2, _forge, args=(tmp_path,), kwargs={
        "host": "spark-driver-7", "renewed": time.time()})
    writes.start()
    try:
        with pytest.raises(JobAlreadyRunning, match="spark-driver-7"):
            _lease(tmp_path).acquire()
    finally:
        writes.join()


def test_a_renewal_that_stalled_past_a_takeover_never_makes_its_holder_the_holder_again(tmp_path, monkeypatch):
    """A holder on another host passes its check, then its write stalls past lease_ttl; a
    rewind (another process) takes the next generation, deleting the stalled one's file, and
    releases it when done; the stalled write then lands, recreating the old generation's
    file. Generations only grow, so the old holder's checks fail from then on."""
    monkeypatch.setattr(socket, "gethostname", lambda: "spark-driver-7")  # the old holder's host
    stalled = _lease(tmp_path, ttl_s=5)
    stalled.acquire()
    stalled._stop.set()  # noqa: SLF001 (its heartbeat is the write that stalls)
    stalled.check()
    monkeypatch.undo()
    lapsed = json.loads((tmp_path / "cp.lease" / LEASE_FILE).read_text())
    (tmp_path / "cp.lease" / LEASE_FILE).write_text(json.dumps({**lapsed, "renewed": time.time() - 60}))

    code = ("from spark_jobs.runtime.checkpoint.directory import Checkpoint; "
            "from spark_jobs.runtime.checkpoint.lease import Lease; "
            f"rewind = Lease(Checkpoint({str(tmp_path / 'cp')!r}), 'dedup', 60, purpose='rewind'); "
            "rewind.acquire(); print(rewind.generation); rewind.release()")
    taken = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(taken.stdout) == 1

    monkeypatch.setattr(socket, "gethostname", lambda: "spark-driver-7")
    stalled._write(stalled._path(0))  # noqa: SLF001 (the write that stalled, landing now)
    with pytest.raises(LeaseLost):
        stalled.check()
    with pytest.raises(LeaseLost):
        stalled.renew()
    monkeypatch.undo()
    successor = _lease(tmp_path)
    successor.acquire()
    assert successor.generation == 2


def test_a_wall_clock_step_does_not_make_a_live_holder_on_this_host_look_stale(tmp_path, monkeypatch):
    """The wall clock jumps 300 s forward (an NTP step, a VM resumed): a taker on this host
    judges the live holder's renewal on the clock that counts from boot, so it is refused
    and the holder is not killed."""
    holder = _holding_process(tmp_path, 5)
    try:
        stepped = time.time() + 300
        monkeypatch.setattr(time, "time", lambda: stepped)
        with pytest.raises(JobAlreadyRunning, match=f"pid {holder.pid}"):
            _lease(tmp_path).acquire()
        monkeypatch.undo()
        assert holder.poll() is None
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("ttl", ["0 seconds", "4 seconds"])
def test_a_lease_ttl_below_the_floor_is_refused_when_the_settings_load(ttl):
    from spark_jobs.config import load_settings
    from spark_jobs.errors import ConfigError

    with pytest.raises(ConfigError, match="lease_ttl .* must be at least 5 seconds"):
        load_settings(env={"SIGFLOW_LEASE_TTL": ttl})


def test_a_lease_file_with_wrong_types_is_unreadable_not_a_crash(tmp_path):
    _forge(tmp_path, renewed="yesterday", pid="one")
    lease = _lease(tmp_path)
    assert lease.holder() is None
    lease.acquire()  # a file no sigflow wrote holds nothing
    lease.release()


def test_a_holder_whose_storage_fails_for_a_moment_still_holds_its_lease(tmp_path):
    """A read that fails is not a lease taken over: the holder's check before a commit asks
    again and goes on writing, where it used to stop its run."""
    lease = _lease(tmp_path)
    lease.acquire()
    try:
        outage = StorageDown(1.0)
        lease.fs = outage.filesystem()
        lease.check()
        assert outage.refused >= 1
    finally:
        lease.release()


def test_a_holder_whose_storage_keeps_failing_stops_saying_so(tmp_path, monkeypatch):
    from spark_jobs.runtime.checkpoint import storage

    monkeypatch.setattr(storage, "READ_PATIENCE_S", 1.0)  # a storage down for good, sooner
    lease = _lease(tmp_path)
    lease.acquire()
    try:
        lease.fs = StorageDown(60).filesystem()
        with pytest.raises(LeaseLost, match="could not read its lease.*503") as lost:
            lease.check()
        assert "once the storage answers again" in lost.value.hint
    finally:
        lease.release()  # its storage still down: it says so and lets the lease lapse


def test_a_taker_that_cannot_read_a_live_lease_does_not_take_it(tmp_path):
    """While the storage fails, a second run cannot tell whether the lease is held: it waits
    for an answer and is refused, where it took the live holder's lease."""
    first, second = _lease(tmp_path), _lease(tmp_path)
    first.acquire()
    try:
        outage = StorageDown(1.5)
        second.fs = outage.filesystem()
        with pytest.raises(JobAlreadyRunning, match=f"pid {os.getpid()}"):
            second.acquire()
        assert outage.refused >= 1
        first.check()
    finally:
        first.release()


def test_the_heartbeat_renews_again_once_the_storage_answers(tmp_path):
    """A renewal that cannot read the lease tries again at the next beat: the heartbeat used
    to end at the first failed read, and the lease lapsed under a live run."""
    lease = _lease(tmp_path, ttl_s=2.0)  # renewed every 0.5 s
    lease.acquire()
    try:
        outage = StorageDown(1.5)
        lease.fs = outage.filesystem()
        wait_for(lambda: time.monotonic() > outage.until, timeout_s=10, what="the storage to answer")
        # through this file system a renewal is written in place (no rename): a read may
        # meet it half written and find no holder, so each read is asked again
        before = wait_for(lambda: _renewed(lease), timeout_s=10, what="a readable renewal")
        wait_for(lambda: (_renewed(lease) or 0) > before, timeout_s=10, what="a renewal after the outage")
        assert outage.refused >= 1
    finally:
        lease.release()


def test_a_holder_in_another_container_with_this_host_name_is_not_judged_by_this_hosts_processes():
    """Two containers may share a host name while each has its own processes: a live lease of
    the other one names a pid that means nothing here, and must not be taken for dead."""
    import socket
    import time

    from spark_jobs.runtime.checkpoint.lease import Holder, this_machine

    unused_pid = 2**22 - 3  # above any pid this host hands out by default
    elsewhere = Holder("run-1", "ingest", socket.gethostname(), unused_pid, 0.0, time.time(), 60.0,
                       renewed_since_boot=None, machine="another-boot/4026531836")
    assert not elsewhere.on_this_host() and elsewhere.alive()
    here = Holder("run-1", "ingest", socket.gethostname(), unused_pid, 0.0, time.time(), 60.0, machine=this_machine())
    assert here.on_this_host() and not here.alive()  # its process is gone
    stale = Holder("run-1", "ingest", socket.gethostname(), unused_pid, 0.0, time.time() - 120, 60.0,
                   machine="another-boot/4026531836")
    assert not stale.alive()  # by its renewal, on the wall clock


def test_a_lease_records_which_boot_and_pid_namespace_holds_it(tmp_path):
    from spark_jobs.runtime.checkpoint.directory import Checkpoint
    from spark_jobs.runtime.checkpoint.lease import Lease, this_machine

    with Lease(Checkpoint(str(tmp_path / "ck")), "ingest", 60.0) as lease:
        assert lease.holder().machine == this_machine() != ""


@pytest.mark.slow  # spark-submit's JVM
def test_a_stopped_holder_under_spark_submit_is_fenced_with_its_driver_jvm(tmp_path):
    """Under spark-submit the driver's JVM is the parent of the Python process that holds the
    lease, and the JVM makes the Delta commits: the taker kills it too before it takes over,
    so no commit of the stale run can land after the lease is taken."""

    from tests.helpers import REPO

    script = tmp_path / "holder.py"
    script.write_text(
        "import os, signal\n"
        "from spark_jobs.runtime.checkpoint.directory import Checkpoint\n"
        "from spark_jobs.runtime.checkpoint.lease import Lease\n"
        f"Lease(Checkpoint({str(tmp_path / 'cp')!r}), 'dedup', 2).acquire()\n"
        "print('held', os.getpid(), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGSTOP)  # hung: it stops renewing\n")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(REPO)}
    submit = subprocess.Popen([str(Path(sys.executable).with_name("spark-submit")), "--master", "local[1]",
                               str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              env=env, cwd=REPO)
    try:
        line = submit.stdout.readline().split()
        assert line[:1] == ["held"], line
        python = psutil.Process(int(line[1]))
        jvm = python.parent()
        assert "org.apache.spark.deploy.SparkSubmit" in jvm.cmdline()
        time.sleep(2.5)
        successor = _lease(tmp_path)
        successor.acquire()
        assert _gone(python) and _gone(jvm)  # the JVM too, before the lease was taken
        successor.release()
    finally:
        if submit.poll() is None:
            submit.kill()
        submit.wait()


def _gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _renewed(lease: Lease) -> float | None:
    holder = lease.holder()
    return holder.renewed if holder is not None else None
