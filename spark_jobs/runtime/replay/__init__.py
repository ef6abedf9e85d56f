"""device_events_raw as a job's source, for the records Kafka no longer holds: ``extent``
(what raw holds of a job's topics, and where a replay from it hands off to Kafka),
``source`` (raw's rows shaped as Spark's Kafka source gives them, with Kafka's own offsets)."""
