"""How a job runs: ``runner`` wires a job (a pure function of DataFrames, ``spark_jobs.jobs``)
to its source, its tables, a trigger and a checkpoint; ``spark`` builds the one session, with
the pinned JARs of ``classpath``. By concern:

- ``kafka/``: where Kafka is, how to speak to it, Spark's Kafka source and the admin client;
- ``delta/``: how a micro-batch reaches its tables exactly once, and their schemas;
- ``checkpoint/``: the checkpoint directory, the lease that admits one writer, the start guards;
- ``metrics/``: per-batch figures from Spark's progress, pipeline_metrics, a run's summary.
"""
