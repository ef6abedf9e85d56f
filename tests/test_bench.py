"""`make bench` runs end to end at a toy size and prints its figures, for a stateless and a
stateful job beside their hand-written jobs, without its warm-up, state and alert-latency sections
(the alert paths' own tests run both paths): every other section of the bench runs, with the code path every job takes (the jobs themselves are
proven by their own tests). Its speed is not asserted: the figures are for people (docs/benchmarks.md).
In this process, on the session's SparkSession: a JVM of its own would only add its start-up
and warm-up. The sections' runs (marked ``bench``, about ten minutes in all) are what `make bench`
runs before its own sections, so a broken section fails in minutes rather than hours in; `make
test` leaves them out."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from bench import jobs as bench
from spark_jobs.runtime.delta.table_access import count_rows, read_pandas

MEASURED = ("ingest", "windowed-averages")


@pytest.mark.bench
@pytest.mark.slow
@pytest.mark.timeout(600)  # about 150 s beside the suite
def test_bench_ends_with_one_rate_and_ratio_line_per_job_and_quarantines_the_whole_storm(spark, capsys):
    assert bench.main(["--events", "1000", "--storm-events", "300", "--devices", "20",
                       "--latency-rate", "200", "--latency-seconds", "3", "--no-write", "--tries", "1",
                       "--jobs", *MEASURED, "--skip", "warm-up", "state", "alerts"]) == 0
    out = capsys.readouterr().out
    ratio = r"(\d+(?:\.\d+)?(?:e[-+]\d+)?)"
    lines = re.findall(rf"^bench (\S+) events_per_s=(\d+) handwritten_per_s=\d+ vs_handwritten={ratio} vs_confluent_kafka={ratio} "
                       rf"vs_kafka_jvm_consumer={ratio} vs_spark_kafka_source={ratio} no_data_batch_ms=(\S+)$",
                       out, re.M)
    assert [line[0] for line in lines] == list(MEASURED)
    assert all(int(rate) > 0 and all(float(r) > 0 for r in ratios) for _, rate, *ratios, _ in lines)
    # ingest is stateless (Spark runs no batch without records); windowed-averages' watermark
    # moves in its last batch, so a no-data batch follows it
    idle = [line[-1] for line in lines]
    assert idle[0] == "none" and idle[1].isdigit(), out
    handwritten = re.findall(r"hand-written (\S+): ([\d,]+) events/s", out)
    assert [kind for kind, _ in handwritten] == list(MEASURED)
    # ingest's fifth table by hand too (Delta's MERGE), beside it with no target of its own
    assert re.search(r"^bench ingest vs_handwritten_ingest_with_device_status=\d", out, re.M), out
    storm = re.search(r"storm \(10% malformed\): .* ([\d,]+) quarantined of ([\d,]+) malformed", out)
    assert storm and storm[1] == storm[2] != "0", out
    # every target the run measured, beside its figure (docs/benchmarks.md)
    goals = re.findall(r"^  (.+?): [\d.,]+ \(target (?:>=|<=) [\d.,]+\) (?:met|MISSED)$", out, re.M)
    assert goals == ["ingest of ingest", "windowed-averages of windowed-averages",
                     "ingest under a 10% malformed storm, of clean", "ingest batch p95 ms at 200 events/s",
                     "windowed-averages no-data batch ms"], out


@pytest.mark.bench
@pytest.mark.slow
def test_the_scale_section_measures_each_command_in_a_process_of_its_own(tmp_path, capsys):
    from bench import scale as bench_scale

    assert bench_scale.main(["--rows", "2000", "--new", "300", "--keep", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = re.findall(r"^scale (\S+) rows=2000->2000 seconds=(\S+)->\S+ peak_mb=(\d+)->\d+", out, re.M)
    assert [name for name, *_ in lines] == ["quality_first", "quality_dedup_first", "quality_new",
                                            "quality_dedup_new", "status", "report"]
    # a fresh Python process with pandas and delta-rs loaded holds well over 50 MB
    assert all(float(seconds) > 0 and int(peak) > 50 for _, seconds, peak in lines)
    # the tables measured hold what was said: 2,000 events and a quarantined record per 100
    assert count_rows(str(tmp_path / "events-2000" / "delta" / "device_events")) == 2000 + 300
    # quality's first run read every event, its second only the 300 added after it
    results = read_pandas(str(tmp_path / "events-2000" / "delta" / "dq_results"))
    schema_checks = results[results.expectation == "expect_table_columns_to_match_set"].sort_values("run_time")
    assert schema_checks.groupby("table_name").rows_checked.apply(list).to_dict() == {
        "device_events": [2000, 300], "device_events_deduplicated": [2000, 300]}
    assert count_rows(str(tmp_path / "events-2000" / "delta" / "quarantined_events")) == 20


@pytest.mark.bench
@pytest.mark.slow
def test_the_bookkeeping_bench_appends_every_batch_at_both_intervals_and_checkpoints_as_each_says(capsys):
    from bench import bookkeeping

    assert bookkeeping.main(["--batches", "100", "--tries", "1"]) == 0
    out = capsys.readouterr().out
    runs = re.findall(r"^bookkeeping interval=(\d+): first 50 batches \d+ ms a batch, last 50 \d+, all (\d+) "
                      r"\S+ CPU-s; table_status checkpoints: (\d+)$", out, re.M)
    # the warm-up's 50 batches, then each interval's 100: a checkpoint at each multiple of the
    # interval among the table's versions (its creation, its key constraint, then a batch each)
    assert runs == [("100", "50", "0"), ("100", "100", "1"), ("10", "100", "10")], out
    assert re.search(r"^bookkeeping: 100 batches' appends, median of 1: \S+ CPU-s at interval 100, \S+ CPU-s "
                     r"at interval 10 \(\d\.\d\dx\)$", out, re.M), out

@pytest.mark.bench
@pytest.mark.slow
def test_the_reconcile_bench_counts_the_late_events_whose_windows_are_final(tmp_path, capsys):
    from bench import reconcile as bench_reconcile

    assert bench_reconcile.main(["--rows", "40000", "--devices", "20", "--keep", str(tmp_path)]) == 0
    (line,) = re.findall(r"^reconcile rows=40000 late=(\d+) \(1%\) counted=(\d+) rows_corrected=(\d+) seconds=\S+$",
                         capsys.readouterr().out, re.M)
    late, counted, corrected = map(int, line)
    # 2,000 events per device, 5 s apart (2 h 47 min): the late events of the last 20 minutes
    # wait for their sliding windows, the watermark being 10 minutes behind; the others count
    assert 300 < late < 500 and late * 0.8 < counted < late and corrected > 0


@pytest.mark.bench
@pytest.mark.slow
def test_the_sessions_bench_counts_a_candidate_only_when_it_gives_the_jobs_sessions(capsys):
    from bench import sessions as bench_sessions

    assert bench_sessions.main(["--events", "600", "--devices", "20", "--tries", "1",
                                "--only", bench_sessions.JOB, bench_sessions.PER_DEVICE]) == 0
    out = capsys.readouterr().out
    rates = dict(re.findall(r"^(.+?): [\d,]+ events/s; median [\d,]+ \((\d\.\d\d) of plain ingest\)", out, re.M))
    assert set(rates) == {bench_sessions.JOB, bench_sessions.PER_DEVICE, "plain ingest"}
    assert rates["plain ingest"] == "1.00"
    assert re.search(rf"^{bench_sessions.PER_DEVICE}: .*; the job's sessions$", out, re.M), out


def test_the_contract_section_times_each_parse_beside_from_json(spark, settings, capsys):
    from bench import contract as bench_contract

    measured = bench_contract.parse_costs(spark, settings, events=300, devices=5, tries=2)
    out = capsys.readouterr().out
    parses = [f"contract, {what}{way}" for way in ("", ", checks alone")
              for what in ("readings", "valid events", "every record")]
    late_rule = ["late rule", "late rule, every record parsed"]
    assert {name: len(runs) for name, runs in measured.items()} == dict.fromkeys(["from_json", *late_rule, *parses], 2)
    lines = re.findall(r"^parse (.+?): [\d,]+ / [\d,]+ ms; median [\d,]+ ms \((\d+\.\d\d) of from_json\)$", out, re.M)
    assert [name for name, _ in lines] == list(measured) and lines[0][1] == "1.00", out


@pytest.mark.parametrize(("option", "setting"), [("--jvm-options=-Dspark.sql.shuffle.partitions=4", "jvm_options"),
                                                 ("--driver-memory=lots", "spark_driver_memory")])
def test_the_capacity_section_refuses_options_the_settings_refuse_before_starting_a_process(
        option, setting, tmp_path, monkeypatch):
    """Spark properties given as Java options (-Dspark.*) and a heap Java cannot read are
    refused by the settings: the bench says so before it starts a broker, and leaves none
    running."""
    import tempfile

    import psutil

    from bench import capacity
    from spark_jobs.errors import ConfigError

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where each shape's data directory goes
    with pytest.raises(ConfigError, match=setting):
        capacity.main(["--shapes", "one", "--rates", "100", option])
    left = [process.pid for process in psutil.process_iter(["cmdline"])
            if any(str(tmp_path) in part for part in process.info["cmdline"] or ())]
    assert left == [] and list(tmp_path.iterdir()) == []


@pytest.mark.bench
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_capacity_section_runs_the_pipeline_as_deployed_and_times_each_row_from_its_send(capsys):
    from bench import capacity

    assert capacity.main(["--shapes", "one", "--rates", "100", "--settle-seconds", "5", "--seconds", "10",
                          "--warm-seconds", "5", "--warm-max-seconds", "5", "--devices", "50", "--jobs", "ingest"]) == 0
    out = capsys.readouterr().out
    step = re.search(r"^one application, 100 events/s offered from 50 devices \(([\d,]+)/s sent over (\d+) s after 5 s at it\): "
                     r"(kept up|fell behind)", out, re.M)
    assert step and 0 < int(step[1].replace(",", "")) <= 110, out
    (ingest,) = re.findall(r"^  ingest\s+(\d+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)$", out, re.M)
    batches, p50, p95, commit, lag = int(ingest[0]), *(int(n.replace(",", "")) for n in ingest[1:])
    assert batches >= 1 and lag > 0  # a batch ran; records waited for it
    assert 0 < p50 <= p95 and 0 < commit <= p50  # the commit is a part of the batch
    fresh = {table: (int(rows.replace(",", "")), float(p50), float(p95)) for table, rows, p50, p95 in re.findall(
        r"^  (device_\w+|quarantined_events)\s+([\d,]+)\s+(-?[\d.]+)\s+(-?[\d.]+)$", out, re.M)}
    assert set(fresh) == {"device_events_raw", "device_events", "device_alerts", "quarantined_events"}, out
    # every record sent in the step has its raw row (alerts too), and no row is visible
    # before its record was sent
    assert fresh["device_events_raw"][0] >= int(step[2]) * 50
    assert all(0 <= p50 <= p95 for _, p50, p95 in fresh.values()), fresh
    # the CPU the step cost, by whom, within the cores the step had
    cpu = re.search(r"^  CPU over the step and its drain \((\d+) s, (\d+) core-seconds\): simulator ([\d,]+) s, "
                    r"pipeline ([\d,]+) s, broker ([\d,]+) s$", out, re.M)
    assert cpu, out
    simulator, pipeline, broker = (int(n.replace(",", "")) for n in cpu.groups()[2:])
    assert pipeline > 0 and simulator + pipeline + broker <= int(cpu[2]) + 3  # each figure rounded
    parts = re.search(r"^  the pipeline's: its JVMs ([\d,]+) s \(their JIT compilers ([\d,]+) s\), its Pythons "
                      r"([\d,]+) s$", out, re.M)
    assert parts, out
    jvm, jit, python = (int(n.replace(",", "")) for n in parts.groups())
    assert abs(jvm + python - pipeline) <= 1 and 0 < jit <= jvm  # a JVM just started compiles
    assert re.search(r"^  one application: highest rate kept up, events/s: [\d,]+ \(target >= 5,000\) "
                     r"(met|MISSED)$", out, re.M), out


def test_the_layout_section_reads_the_same_rows_in_every_layout(capsys):
    from bench import layout as bench_layout

    assert bench_layout.main(["--rows", "100000", "--devices", "50", "--appends", "12", "--tries", "1"]) == 0
    out = capsys.readouterr().out
    # 2,000 events per device every 5 s: the hour from the middle of the span holds 720 of each
    for query, rows in (("one device, one hour", 720), ("the fleet, one hour", 50 * 720)):
        block = out.split(f"  {query}:\n")[1]
        figures = re.findall(r"^    (as written|compacted|z-ordered)\s+([\d.]+) ms\s+(\d+) files\s+([\d,]+) rows$",
                             block, re.M)[:3]
        assert [state for state, *_ in figures] == ["as written", "compacted", "z-ordered"], out
        assert {int(n.replace(",", "")) for *_, n in figures} == {rows}, out  # a layout never changes an answer
        assert int(figures[1][2]) <= int(figures[0][2])  # compaction leaves fewer files to open


@pytest.mark.bench
@pytest.mark.slow
def test_the_recompute_section_rebuilds_from_kafka_and_from_raw_and_rewinds_past_retention(capsys):
    from bench import recompute as bench_recompute

    assert bench_recompute.main(["--rows", "3000", "--tries", "1", "--batch-records", "1000", "--no-warm-up",
                                 "--replay-records", "500"]) == 0
    out = capsys.readouterr().out
    rates = re.search(r"^recompute windowed-averages rows=3000 from_kafka=([\d,]+)/s from_raw=([\d,]+)/s ratio=(\S+)$",
                      out, re.M)
    assert rates and all(int(rate.replace(",", "")) > 0 for rate in rates.groups()[:2]), out
    # Kafka's records deleted, the last batch that read some is re-run from raw alone
    rewound = re.search(r"a rewind re-runs its last batches from raw: ([\d,]+) records", out)
    assert rewound and int(rewound[1].replace(",", "")) >= 500, out


def test_a_ratio_is_printed_with_its_spread_over_the_rounds_each_run_beside_the_one_of_its_round():
    """Rounds alternate which side goes first; a run is compared with the other side's run of
    its own round, next to it in time, never with a run of another round."""
    ours, theirs = [30.0, 40.0, 20.0], [20.0, 40.0, 10.0]  # per round: 1.5, 1.0, 2.0
    assert bench._ratios(ours, theirs) == "median ratio 1.50, round by round 1.00 to 2.00"


def test_the_capacity_sections_cpu_meter_keeps_what_an_exited_worker_spent():
    """Spark ends idle Python workers and forks new ones mid-step: what one spent before it
    exited still counts, and no part of the pipeline's CPU goes below zero."""
    import subprocess
    import sys
    import time

    from bench.capacity import CpuMeter

    burn_then_exit = ("import time; end = time.process_time() + 0.6\n"
                      "while time.process_time() < end: pass\n"
                      "time.sleep(1.0)")
    parent = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess, sys, time; subprocess.run([sys.executable, '-c', {burn_then_exit!r}]);"
                               " time.sleep(1.0)"])
    try:
        meter = CpuMeter([parent.pid])
        while parent.poll() is None:
            meter.sample()
            time.sleep(0.1)
    finally:
        parent.kill()
    spent = meter.spent()
    assert spent["python"] >= 0.6 and min(spent.values()) >= 0.0, spent


@pytest.mark.bench
@pytest.mark.slow
def test_the_batch_cost_section_parts_a_batchs_cost_from_its_events(tmp_path):
    # a process of its own: the section starts its session with Spark's UI, which the
    # suite's session has off
    done = subprocess.run([sys.executable, "-m", "bench.batch_cost", "--events", "3000", "--devices", "100",
                           "--records", "500", "1500", "--tries", "1", "--warm-runs", "1"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = re.findall(r"^ +([\d,]+) records a batch: (\d+) batches, [\d.]+ s, JVM [\d.]+ CPU-s "
                      r"\(jit [\d.-]+, gc [\d.-]+, tasks [\d.-]+, rest [\d.-]+\), Python [\d.]+, its workers [\d.]+$", done.stdout, re.M)
    assert [records for records, _ in runs] == ["500", "500", "1,500"], done.stdout
    # the same records in smaller batches: more of them, for every job
    assert int(runs[1][1]) > int(runs[2][1]) > 0, done.stdout
    assert re.search(r"^a batch more: jit \S+, gc \S+, tasks \S+, rest \S+, python \S+, workers \S+ CPU-s; \S+ in all$",
                     done.stdout, re.M), done.stdout
    assert re.search(r"^the 3,000 events beside their batches: -?[\d.]+ CPU-s, -?[\d.]+ ms each$", done.stdout, re.M)
    jobs = re.search(r"^Spark jobs a batch \(batches of 500\): (.+)$", done.stdout, re.M)
    assert jobs and [part.split()[0] for part in jobs[1].split(", ")] == [
        "ingest", "dedup", "windowed-averages", "fleet-rollup", "sessions", "alert-join"], done.stdout
    assert all(float(part.split()[1]) >= 1 for part in jobs[1].split(", ")), done.stdout
    for records in ("500", "1,500"):
        spent = re.search(rf"^tasks' CPU-s a batch \(batches of {records}\): (.+)$", done.stdout, re.M)
        assert spent and all(float(part.split()[1]) > 0 for part in spent[1].split(", ")), done.stdout
