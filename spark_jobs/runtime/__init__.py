"""How a job runs: ``launch`` picks the run, ``runner`` wires a job (a pure function of
DataFrames, ``spark_jobs.jobs``) to its source, its tables, a trigger and a checkpoint
(``real_time`` a real-time job to its Kafka sink), ``commit`` is how each batch commits
exactly once; ``spark`` builds the one session, with the pinned JARs of ``classpath``. By concern:

- ``kafka/``: where Kafka is, how to speak to it, Spark's Kafka source, admin, offsets, producer;
- ``delta/``: what a commit records, how a batch's rows reach their tables once, schemas, and
  the tables outside Spark (``table_access``, the one module that speaks delta-rs);
- ``checkpoint/``: the checkpoint directory, the lease that admits one writer, a restart's
  intent, the start guards;
- ``metrics/``: per-batch figures from Spark's progress, pipeline_metrics, a run's summary.
"""
