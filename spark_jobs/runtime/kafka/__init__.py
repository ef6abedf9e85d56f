"""Kafka as the jobs see it: ``address`` (the configured cluster, or the embedded broker's
record), ``connection`` (bootstrap servers and security, rendered per client library),
``source`` (Spark's Kafka source and its options) and ``client`` (reachability, topics and
confirmed offsets, outside Spark)."""
