"""Exactly-once and restart behaviour of the runner, with real processes killed mid-batch."""

import random
from collections import Counter

import pytest

from spark_jobs import broker as embedded
from spark_jobs import kafka_client
from spark_jobs.errors import DataLossError
from spark_jobs.failpoints import POINTS
from spark_jobs.jobs import JOBS
from spark_jobs.simulate import generate_alerts, generate_events
from tests.conftest import make_settings
from tests.helpers import produce, run_job, sigflow, table

# columns that say when a row was written, not what it holds
WRITE_TIME_COLUMNS = {"ingest_time", "batch_id"}


def _contents(settings, name):
    frame = table(settings, name)
    columns = sorted(set(frame.columns) - WRITE_TIME_COLUMNS)
    return Counter(tuple(map(repr, row)) for row in frame[columns].itertuples(index=False))


def test_sigkill_of_any_job_at_random_points_loses_and_duplicates_nothing(spark, settings, tmp_path):
    """Two jobs drawn at random, each SIGKILLed at a random commit point and batch inside a
    `sigflow pipeline` process, then a run that finishes: their tables equal an uninterrupted
    run. Jobs read Kafka independently, so only the two drawn run (a full pipeline per
    attempt would cost minutes); a failure names its seed, and CI runs cover every job."""
    seed = random.randrange(10_000)
    rng = random.Random(seed)
    victims = sorted(rng.sample(list(JOBS), 2), key=list(JOBS).index)  # pipeline order: each is hit
    events = generate_events(400, devices=6, seed=seed, malformed_ratio=0.05, duplicate_ratio=0.05)
    produce(settings, events)
    produce(settings, generate_alerts(events, every=20, seed=seed), settings.alerts_topic)
    s = settings.replace(max_offsets_per_trigger=170)  # three batches per job

    uninterrupted = s.replace(data_dir=str(tmp_path / "uninterrupted"))
    for job in victims:
        run_job(spark, uninterrupted, job)

    for job in victims:
        failpoint = f"{job}/{rng.choice(POINTS)}:{rng.randint(0, 1)}"
        killed = sigflow(s, "pipeline", *victims, extra_env={"SIGFLOW_FAILPOINTS": failpoint})
        assert killed.returncode == -9, f"seed {seed}, {failpoint}: " + killed.stderr[-2000:]
    finished = sigflow(s, "pipeline", *victims)
    assert finished.returncode == 0, finished.stderr[-2000:]

    written = {spec.name for job in victims for spec in JOBS[job].tables}
    written |= {"late_events"} if any(JOBS[job].late_rule for job in victims) else set()
    for name in sorted(written):
        assert _contents(s, name) == _contents(uninterrupted, name), f"seed {seed}, victims {victims}: {name}"


@pytest.fixture
def private_broker(tmp_path):
    """A broker of this test's own, to lose its (in-memory) data on restart."""
    s = make_settings(tmp_path / "broker", "", broker_port=0)
    yield s
    embedded.stop(s)


def _fresh_topic(broker_settings, settings):
    info = embedded.start(broker_settings)
    s = settings.replace(kafka_bootstrap_servers=info.bootstrap_servers)
    kafka_client.create_topics(s.kafka_bootstrap_servers, [s.events_topic, s.alerts_topic], 3, 60000)
    return s


def test_lost_kafka_offsets_stop_the_job_unless_fail_on_data_loss_is_false(spark, tmp_path, private_broker):
    s = _fresh_topic(private_broker, make_settings(tmp_path / "data", ""))
    produce(s, generate_events(60, malformed_ratio=0))
    assert run_job(spark, s).rows_in == 60

    embedded.stop(private_broker)  # memory storage: the topic and its records are gone
    s = _fresh_topic(private_broker, s)
    produce(s, generate_events(9, seed=3, malformed_ratio=0))
    with pytest.raises(DataLossError, match="no longer has offsets") as err:
        run_job(spark, s)
    assert "runbooks" in err.value.hint

    lenient = s.replace(fail_on_data_loss=False)
    assert run_job(spark, lenient).rows_in == 9
    assert len(table(s, "device_events_raw")) == 69


def test_processing_time_run_keeps_going_until_sigterm_then_stops_cleanly(settings):
    import signal
    import subprocess
    import sys
    import time

    from tests.helpers import REPO, cli_env

    job = subprocess.Popen(
        [sys.executable, "-m", "spark_jobs.cli", "run", "ingest", "--processing-time", "1s"],
        env=cli_env(settings), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        produce(settings, generate_events(100, malformed_ratio=0))
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # the running query picks up data as it comes
            try:
                if len(table(settings, "device_events_raw")) == 100:
                    break
            except Exception:  # table not created yet
                pass
            time.sleep(1)
        produce(settings, generate_events(50, seed=9, malformed_ratio=0))
        while time.monotonic() < deadline and len(table(settings, "device_events_raw")) < 150:
            time.sleep(1)
        job.send_signal(signal.SIGTERM)
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, err[-2000:]
    assert "ingest:" in out and "150 rows in" in out
    assert len(table(settings, "device_events_raw")) == 150
