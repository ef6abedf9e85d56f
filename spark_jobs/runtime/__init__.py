"""How a job runs: the Spark session, its Kafka source and Delta sinks, checkpoints, batches and metrics."""
