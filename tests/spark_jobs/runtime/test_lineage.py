"""Every job run reports its lineage (OpenLineage run events: topics in, tables out with the
version each reached), and `sigflow lineage TABLE` answers from those events which job and
which topics produced a table, up to which version."""

import http.server
import json
import logging
import threading

from deltalake import DeltaTable

from spark_jobs.ops.table_lineage import table_lineage
from spark_jobs.runtime.lineage_events import RunLineage, events_file
from tests.helpers import (
    at,
    json_lines,
    run_job,
    send,
    send_alert,
    table,
)
from tests.oracle import Event


def test_the_lineage_of_alert_signal_context_names_both_topics_and_alert_join(spark, settings):
    s = settings
    send(s, [Event("e1", "d1", at(12, 0), 1.0), Event("e2", "d1", at(12, 3), 2.0)])
    send_alert(s, "a1", "d1", at(12, 5))
    run_job(spark, s, "alert-join")
    first_version = DeltaTable(s.table_uri("alert_signal_context")).version()
    send(s, [Event("e3", "d1", at(12, 20), 3.0)])
    send_alert(s, "a2", "d1", at(12, 21))
    run_job(spark, s, "alert-join")
    assert set(table(s, "alert_signal_context").alert_id) == {"a1", "a2"}

    events = [json.loads(line) for line in events_file(s, "alert-join").read_text().splitlines()]
    assert [e["eventType"] for e in events] == ["START", "COMPLETE", "START", "COMPLETE"]
    assert events[0]["run"]["runId"] == events[1]["run"]["runId"] != events[2]["run"]["runId"]
    kafka = f"kafka://{s.kafka.bootstrap_servers.split(',')[0]}"
    assert {(i["namespace"], i["name"]) for i in events[1]["inputs"]} == {
        (kafka, s.streaming.events_topic), (kafka, s.streaming.alerts_topic)}

    lineage = table_lineage(s, "alert_signal_context")
    assert [run.job for run in lineage.runs] == ["alert-join", "alert-join"]
    newest, earlier = lineage.runs
    assert newest.version == str(DeltaTable(s.table_uri("alert_signal_context")).version())
    assert earlier.version == str(first_version) and int(earlier.version) < int(newest.version)
    assert sorted(newest.topics) == sorted(f"{kafka}/{t}" for t in (s.streaming.events_topic, s.streaming.alerts_topic))
    assert newest.airflow_task is None  # run by hand, not by Airflow
    text = "\n".join(lineage.lines())
    assert text.startswith(f"alert_signal_context (file {s.table_uri('alert_signal_context')}): "
                           f"version {newest.version}, written by alert-join"), text
    assert s.streaming.events_topic in text and s.streaming.alerts_topic in text


class _LineageApi(http.server.BaseHTTPRequestHandler):
    """An OpenLineage API's one endpoint: what POST /api/v1/lineage receives, in ``server.received``."""

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.received.append({"path": self.path, "event": json.loads(body)})
        self.send_response(201)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_events_reach_lineage_url_and_an_endpoint_that_is_down_costs_the_file_nothing(settings, caplog):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _LineageApi)
    server.received = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    up = RunLineage(settings.replace(lineage_url=url), "ingest", [("kafka://k:9092", "events")], {})
    up.start()
    up.complete()
    server.shutdown()
    server.server_close()
    sent = [(r["path"], r["event"]["eventType"], r["event"]["run"]["runId"]) for r in server.received]
    assert sent == [("/api/v1/lineage", "START", up.run_id), ("/api/v1/lineage", "COMPLETE", up.run_id)]

    down = RunLineage(settings.replace(lineage_url=url), "ingest", [("kafka://k:9092", "events")], {})
    with caplog.at_level(logging.WARNING, logger="sigflow.lineage"):
        down.start()
        down.complete()
    assert [r.getMessage() for r in caplog.records if r.name == "sigflow.lineage"] == [
        f"ingest: its OpenLineage {state} event did not reach {url} (Connection refused); the job goes on"
        for state in ("START", "COMPLETE")]
    in_file = [(e["eventType"], e["run"]["runId"]) for e in json_lines(events_file(settings, "ingest"))]
    assert in_file == [("START", up.run_id), ("COMPLETE", up.run_id), ("START", down.run_id), ("COMPLETE", down.run_id)]
