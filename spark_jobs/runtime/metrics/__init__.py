"""What a run reports: ``progress`` turns Spark's query progress into per-batch figures,
``recorder`` writes them to pipeline_metrics once per batch, ``summary`` sums a run for people."""
