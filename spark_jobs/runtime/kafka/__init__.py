"""Kafka as the jobs see it, one module per role: ``address`` (the configured cluster, or the
embedded broker's record), ``connection`` (bootstrap servers and security, rendered per client
library), ``source`` (Spark's Kafka source and its options), and outside Spark ``admin``
(reachability, topics; confluent-kafka), ``offsets`` (confirmed partition bounds;
confluent-kafka) and ``producer`` (sending records; kafka-python)."""
