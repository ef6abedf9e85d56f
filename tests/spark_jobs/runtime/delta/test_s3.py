"""Delta tables on S3 with several writers at once: nothing lost.

delta-spark's default S3 log store checks that a commit file is absent, then PUTs it; two
drivers can both pass the check and the second PUT replaces the first commit, silently
(measured: docs/streaming-facts.md). sigflow's log store (infra/logstore/) makes the PUT
conditional (If-None-Match), as delta-rs does, so S3 itself refuses the loser, and Delta
retries it as the next version. The S3 endpoint is moto's server, a real HTTP S3 API.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from spark_jobs.install import jars
from spark_jobs.jobs.registry import get_job
from spark_jobs.ops import maintenance, restart
from tests.helpers import (
    MULTI_PROCESS,
    REPO,
    cli_env,
    contents,
    jars_with,
    records_in,
    run_job,
    sigflow,
    table,
    wait_for,
)

pytestmark = [MULTI_PROCESS, pytest.mark.slow]

BUCKET = "sigflow"
COMMITS_PER_WRITER = 8


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto's S3 server on loopback, a bucket, and the AWS variables every client reads."""
    import boto3

    from spark_jobs.local.broker import free_port

    port = free_port()
    server = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "sigflow-test",
           "AWS_SECRET_ACCESS_KEY": "sigflow-test-key", "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
    wait_for(lambda: s3.create_bucket(Bucket=BUCKET), timeout_s=30, every_s=0.3, watched=(server,),
             not_yet=(Exception,), what="moto's server")  # refused until it listens
    yield env
    server.terminate()
    server.wait(timeout=30)


@pytest.fixture(scope="module")
def s3_jars() -> Path:
    """A JAR directory with the spark set and the s3 set (hadoop-aws, the AWS SDK, sigflow's log
    store), apart from the default one so the rest of the suite runs without them. Kept
    beside the default one across test runs, like the other sets (659 MB); a change to the
    log store's source gets a directory of its own, so the tests never run a stale build."""
    source = sorted(p for p in jars.LOGSTORE.source.rglob("*") if p.is_file() and "target" not in p.parts)
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in source)).hexdigest()[:12]
    return jars_with("s3", f"jars-with-s3-{digest}")


SPARK_WRITER = """
import sys
from spark_jobs.config import load_settings
from spark_jobs.runtime.spark import get_spark
spark = get_spark(load_settings(overrides={"spark_master": "local[1]"}), "writer")
name, uri, commits = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(commits):
    spark.createDataFrame([(name, i)], "writer string, n int").write.format("delta").mode("append").save(uri)
"""

DELTA_RS_WRITER = """
import sys
import pyarrow as pa
from deltalake import write_deltalake
name, uri, commits = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(commits):
    write_deltalake(uri, pa.table({"writer": [name], "n": pa.array([i], pa.int32())}), mode="append")
"""


@pytest.mark.timeout(600)  # 119 s in a clean-clone make test
def test_two_spark_drivers_and_a_delta_rs_writer_committing_at_once_lose_no_commit(s3, s3_jars):
    import pyarrow as pa
    from deltalake import QueryBuilder, write_deltalake

    os.environ.update(s3)  # delta-rs in this process reads the same variables
    table = f"s3a://{BUCKET}/concurrent-{time.time_ns()}"
    write_deltalake(table, pa.table({"writer": ["create"], "n": pa.array([0], pa.int32())}))
    env = cli_env(None, {**s3, "SIGFLOW_JARS_DIR": str(s3_jars)})
    writers = {name: subprocess.Popen([sys.executable, "-c", code, name, table, str(COMMITS_PER_WRITER)],
                                      env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for name, code in (("spark-1", SPARK_WRITER), ("spark-2", SPARK_WRITER), ("delta-rs", DELTA_RS_WRITER))}
    for name, writer in writers.items():
        output, _ = writer.communicate(timeout=600)
        assert writer.returncode == 0, f"{name}:\n{output[-3000:]}"

    delta = DeltaTable(table)
    rows = QueryBuilder().register("t", delta).execute("select writer, count(*) as commits from t group by writer")
    per_writer = dict(zip(*pa.table(rows.read_all()).to_pydict().values()))
    assert per_writer == {"create": 1, "spark-1": COMMITS_PER_WRITER, "spark-2": COMMITS_PER_WRITER,
                          "delta-rs": COMMITS_PER_WRITER}
    assert delta.version() == 3 * COMMITS_PER_WRITER  # one version per commit, none overwritten
    assert {c.get("engineInfo", "delta-rs").split("/")[0] for c in delta.history()} >= {"Apache-Spark"}


# Two drivers at once, each its own JVM: both shared tables get concurrent writers
# (pipeline_metrics and late_events from both jobs). All six at once measured 25 minutes
# beside the rest of the suite on 2 cores and slowed every test next to it past its
# limits (docs/streaming-facts.md); a third driver added no shared table.
JOBS_AT_ONCE = ("dedup", "windowed-averages")


def _batch_ids(progress_file: Path) -> set[int]:
    return {json.loads(line)["batch_id"] for line in progress_file.read_text().splitlines()}


@pytest.mark.timeout(900)  # 182 s in a clean-clone make test: two JVMs and moto
def test_jobs_maintenance_and_a_rewind_at_once_on_s3_write_what_they_write_one_by_one(
        s3, s3_jars, settings, spark, tmp_path, monkeypatch):
    """Jobs as drivers of their own, all at once, tables and checkpoints on S3, all appending to
    the shared pipeline_metrics and the stateful ones to late_events; meanwhile maintenance compacts and vacuums those tables
    over and over, and dedup, once done, is rewound to its first batch and run again. Every
    table ends as the same steps leave it run one after the other on local disk."""
    for name, value in s3.items():
        monkeypatch.setenv(name, value)  # delta-rs and pyarrow in this process read the same variables
    settings = settings.replace(max_offsets_per_trigger=400)  # two batches with data per job
    produced = sigflow(settings, "simulate", "--events", "600", "--devices", "8", "--seed", "7")
    assert produced.returncode == 0, produced.stderr
    in_kafka = {topic: records_in(settings.kafka.bootstrap_servers, topic)
                for topic in (settings.streaming.events_topic, settings.streaming.alerts_topic)}

    root = f"s3a://{BUCKET}/at-once-{time.time_ns()}"
    on_s3 = settings.replace(data_dir=str(tmp_path / "s3-run"), delta_root=f"{root}/delta",
                             checkpoint_root=f"{root}/checkpoints")
    # The drivers share 2 cores and the memory with the rest of the suite: one task thread
    # and a small heap each (six with 2g heaps had 19 of 24 GiB in use).
    env = cli_env(on_s3, {**s3, "SIGFLOW_JARS_DIR": str(s3_jars), "SIGFLOW_SPARK_MASTER": "local[1]",
                          "SIGFLOW_SPARK_DRIVER_MEMORY": "768m",
                          "SIGFLOW_DELTA_ROOT": on_s3.delta_root, "SIGFLOW_CHECKPOINT_ROOT": on_s3.checkpoint_root})

    def start(job: str) -> subprocess.Popen:
        log = (tmp_path / f"{job}.log").open("a")
        return subprocess.Popen([sys.executable, "-m", "spark_jobs.cli", "run", job], env=env, cwd=REPO,
                                stdout=log, stderr=subprocess.STDOUT)

    def finished(job: str, driver: subprocess.Popen) -> bool:
        if driver.poll() is None:
            return False
        assert driver.returncode == 0, f"{job}:\n{(tmp_path / f'{job}.log').read_text()[-4000:]}"
        return True

    drivers = {job: start(job) for job in JOBS_AT_ONCE}
    dedup_to_rewind = True
    deadline = time.monotonic() + 600
    try:
        while drivers:
            assert time.monotonic() < deadline, f"still running: {sorted(drivers)}"
            maintenance.run(on_s3)
            time.sleep(10)  # a batch here takes 45 s or more: compactions still fall between appends
            for job, driver in list(drivers.items()):
                if finished(job, driver):
                    del drivers[job]
                    if job == "dedup" and dedup_to_rewind:  # other jobs may still be running
                        restart.plan_rewind(on_s3, "dedup", to_batch=0).apply()
                        drivers["dedup"], dedup_to_rewind = start("dedup"), False
    finally:
        for driver in drivers.values():  # a failed test leaves no driver behind
            driver.kill()
            driver.wait(timeout=60)
    assert not dedup_to_rewind
    operations = [c["operation"] for c in reversed(DeltaTable(on_s3.table_uri("pipeline_metrics")).history())]
    assert "WRITE" in operations[operations.index("OPTIMIZE"):], operations  # compacted between appends

    for job in JOBS_AT_ONCE:  # the same steps, one after the other, on local disk
        run_job(spark, settings, job)
    restart.plan_rewind(settings, "dedup", to_batch=0).apply()
    run_job(spark, settings, "dedup")
    maintenance.run(settings)

    tables = {spec.name for job in JOBS_AT_ONCE for spec in get_job(job).tables} | {"late_events"}
    for name in sorted(tables):
        assert contents(on_s3, name) == contents(settings, name), name
    per_job = table(on_s3, "pipeline_metrics").groupby("job")
    for job in JOBS_AT_ONCE:
        assert sorted(per_job.get_group(job)["batch_id"]) == sorted(_batch_ids(on_s3.progress_file(job))), job
    for job in JOBS_AT_ONCE:
        read = sum(in_kafka[topic] for topic in get_job(job).topics(settings.streaming))
        assert per_job.get_group(job)["input_rows"].sum() == read, job


def test_a_lease_on_s3_is_taken_by_one_taker_with_a_conditional_put(s3, monkeypatch):
    """pyarrow has no conditional put; the lease's takeover uses S3's If-None-Match, so of two
    runs taking a lapsed lease on an s3a:// checkpoint only one can."""
    from spark_jobs.errors import LeaseLost
    from spark_jobs.runtime.checkpoint.directory import Checkpoint
    from spark_jobs.runtime.checkpoint.lease import Lease
    from tests.spark_jobs.runtime.checkpoint.test_lease import take_at_once

    for name, value in s3.items():
        monkeypatch.setenv(name, value)
    checkpoint = Checkpoint(f"s3a://{BUCKET}/leases/dedup")
    lapsed = Lease(checkpoint, "dedup", 0.5)
    lapsed.acquire()
    lapsed._stop.set()  # its heartbeat stops: it lapses as a stalled driver's does
    time.sleep(1.0)
    takers = [Lease(checkpoint, "dedup", 60) for _ in range(4)]
    assert take_at_once(takers) == ["refused"] * 3 + ["took"]
    winner = next(lease for lease in takers if lease.generation is not None)
    assert winner.generation == lapsed.generation + 1 and Lease(checkpoint, "dedup", 60).holder().owner == winner.owner
    with pytest.raises(LeaseLost):
        lapsed.renew()  # compare-and-swap: the lapsed holder cannot write its lease back
    winner.release()
    assert Lease(checkpoint, "dedup", 60).holder().released
    lapsed._write(lapsed._path(lapsed.generation))  # noqa: SLF001 (its renewal that stalled, landing late)
    with pytest.raises(LeaseLost):
        lapsed.check()  # generations only grow: the released winner's stays above it
    assert Lease(checkpoint, "dedup", 60).holder().generation == winner.generation


def test_a_checkpoint_on_s3_is_moved_aside_whole(s3, monkeypatch):
    """On S3 a folder is a prefix, and a move is one object's copy: a recover moving a
    checkpoint aside copies every object, then deletes the originals."""
    from pyarrow import fs as pafs

    from spark_jobs.runtime.checkpoint.directory import Checkpoint

    for name, value in s3.items():
        monkeypatch.setenv(name, value)
    checkpoint = Checkpoint(f"s3a://{BUCKET}/moved/ingest")
    files = {"offsets/0": b"v1\n{}", "offsets/1": b"v1\n{}", "commits/0": b"v1\n{}", "sources/0/0": b"v1",
             "state/0/0/1.delta": b"\0\1", "metadata": b'{"id": "x"}'}
    for relative, data in files.items():
        with checkpoint.fs.open_output_stream(f"{checkpoint.path}/{relative}") as out:
            out.write(data)
    aside = checkpoint.move_aside("lost-20261127T000000Z")

    def listed(prefix):
        infos = checkpoint.fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
        return {info.path[len(prefix) + 1:] for info in infos if info.type == pafs.FileType.File}

    assert listed(aside) == set(files) and listed(checkpoint.path) == set()
    with checkpoint.fs.open_input_stream(f"{aside}/state/0/0/1.delta") as moved:
        assert moved.read() == b"\0\1"
    assert not checkpoint.exists()


@pytest.mark.timeout(600)
def test_on_call_commands_on_s3_and_a_recover_cut_short_there_end_as_on_local_disk(
        s3, s3_jars, settings, tmp_path, monkeypatch):
    """ingest with its tables and checkpoint on s3a://, then what on-call does there: status,
    the report, quality twice (the second finds nothing new), and a recover from earliest
    that dies after moving the checkpoint aside and emptying a table. The job then refuses
    to start; the recover applied again finishes, and the rerun leaves every table as the
    first run left it."""
    from spark_jobs.errors import SigflowError
    from spark_jobs.ops import quality, report, status
    from spark_jobs.runtime.runner import JobRun

    for name, value in s3.items():
        monkeypatch.setenv(name, value)
    produced = sigflow(settings, "simulate", "--events", "300", "--devices", "4", "--seed", "5")
    assert produced.returncode == 0, produced.stderr
    root = f"s3a://{BUCKET}/on-call-{time.time_ns()}"
    on_s3 = settings.replace(data_dir=str(tmp_path / "s3-run"), delta_root=f"{root}/delta",
                             checkpoint_root=f"{root}/checkpoints")
    env = {**s3, "SIGFLOW_JARS_DIR": str(s3_jars), "SIGFLOW_SPARK_MASTER": "local[1]",
           "SIGFLOW_SPARK_DRIVER_MEMORY": "768m", "SIGFLOW_DELTA_ROOT": on_s3.delta_root,
           "SIGFLOW_CHECKPOINT_ROOT": on_s3.checkpoint_root}

    def run_ingest() -> None:
        ran = sigflow(on_s3, "run", "ingest", extra_env=env)
        assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-4000:]

    run_ingest()
    written = sorted(spec.name for spec in get_job("ingest").tables)
    first = {name: contents(on_s3, name) for name in written}
    events = table(on_s3, "device_events")
    assert len(events) > 0

    ingest = next(job for job in status.all_status(on_s3) if job.job == "ingest")
    assert ingest.last_batch is not None and ingest.verdict.word not in ("FAILED", "NEVER RUN")
    assert re.search(rf"<td>device_events</td>\s*<td>{len(events)}</td>", report.build(on_s3))
    [first_check] = quality.run(on_s3, ["device_events"])
    assert first_check.rows == len(events) and {o.rows for o in first_check.outcomes} == {len(events)}
    assert [r.rows for r in quality.run(on_s3, ["device_events"])] == [0]  # nothing new

    plan = restart.plan_recover(on_s3, "ingest", recover_from="earliest", force=True)
    assert plan.steps[0].startswith("move the old checkpoint aside")

    def dies() -> None:
        raise RuntimeError("the apply's process died here")

    plan.changes.insert(2, dies)  # after the move and the first table emptied
    with pytest.raises(RuntimeError):
        plan.apply()
    with pytest.raises(SigflowError, match="a recover of its checkpoint did not finish"):
        JobRun(get_job("ingest"), on_s3)
    again = restart.plan_recover(on_s3, "ingest", recover_from="earliest")
    assert not again.refusals and not again.steps[0].startswith("move")  # moved already
    again.apply()
    run_ingest()
    assert {name: contents(on_s3, name) for name in written} == first


def test_raw_on_s3_is_read_for_a_replay_as_on_local_disk(s3, monkeypatch):
    """What a replay from device_events_raw reads, raw on S3: each partition's offsets, and a
    range's records in the Kafka source's columns and order (runtime/replay/)."""
    from datetime import datetime, timezone

    import pyarrow as pa
    from deltalake import write_deltalake

    from spark_jobs.runtime.replay.extent import RawExtent
    from spark_jobs.runtime.replay.source import ARROW_SCHEMA, read_records

    for name, value in s3.items():
        monkeypatch.setenv(name, value)
    uri = f"s3a://{BUCKET}/replay/device_events_raw"
    sent = datetime(2026, 12, 2, 10, 0, tzinfo=timezone.utc)
    for first in range(0, 60, 20):  # three batches of 20 offsets over partitions 0 and 1
        rows = [(p, o) for p in (0, 1) for o in reversed(range(first, first + 20))]  # a file out of order
        write_deltalake(uri, pa.table({
            "key": pa.array([b"k"] * 40), "value": pa.array([f"v{p}-{o}".encode() for p, o in rows]),
            "topic": ["ev"] * 40, "partition": pa.array([p for p, _ in rows], pa.int32()),
            "offset": pa.array([o for _, o in rows], pa.int64()),
            "kafka_timestamp": pa.array([sent] * 40, pa.timestamp("us", tz="UTC"))}), mode="append",
            storage_options={"AWS_S3_ALLOW_UNSAFE_RENAME": "true"})

    whole = RawExtent.of(uri, ["ev"])
    assert (whole.first, whole.end, whole.rows) == ({"ev": {"0": 0, "1": 0}}, {"ev": {"0": 60, "1": 60}}, 120)
    assert RawExtent.of(uri, ["ev"], after={"ev": {"0": 45, "1": 50}}).rows == 15 + 10
    records = read_records(uri, "ev", 1, 15, 25)
    assert records.schema == ARROW_SCHEMA
    assert records.column("offset").to_pylist() == list(range(15, 25))  # in offset order, across two files
    assert records.column("value").to_pylist() == [f"v1-{o}".encode() for o in range(15, 25)]


def test_a_table_created_on_s3_gets_its_checksum_and_a_prefix_holding_files_is_refused(s3, monkeypatch):
    """delta-rs creates the table and its newest version's checksum on S3 as on a local disk
    (runtime/delta/version_checksum.py); a table's location is its prefix followed by a
    slash, so another table whose name begins with it is no file of it, and a prefix that
    holds a file but no table is refused."""
    from spark_jobs.contracts.tables import (
        DEVICE_EVENTS,
        DEVICE_EVENTS_RAW,
        LATE_EVENTS,
    )
    from spark_jobs.errors import SigflowError
    from spark_jobs.runtime.checkpoint import storage
    from spark_jobs.runtime.delta import schema, table_access

    for name, value in s3.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(schema, "CREATOR_WAIT_S", 1.0)
    root = f"s3a://{BUCKET}/checksums"
    for spec in (DEVICE_EVENTS_RAW, DEVICE_EVENTS):  # device_events after device_events_raw's files
        uri = f"{root}/{spec.name}"
        assert schema.create_table(uri, spec) == "created"
        fs, path = storage.filesystem(uri)
        version = table_access.open_table(uri).version()
        written = json.loads(storage.read_bytes(fs, f"{path}/_delta_log/{version:020d}.crc"))
        assert (written["numFiles"], written["metadata"]["id"]) == (0, table_access.table_id(uri))

    fs, path = storage.filesystem(f"{root}/late_events")
    with fs.open_output_stream(f"{path}/part-00000-0f3a.c000.snappy.parquet") as out:
        out.write(b"PAR1")
    with pytest.raises(SigflowError, match="table late_events cannot be created"):
        schema.create_table(f"{root}/late_events", LATE_EVENTS)
