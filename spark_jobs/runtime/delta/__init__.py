"""How a micro-batch reaches Delta (the protocol: ``spark_jobs.runtime.commit``):
``commit_info`` is the record every commit carries, ``concurrent_writes`` commits a batch's
tables at once, ``sink`` appends each exactly once per (app id, batch id); ``schema`` creates
and migrates tables; ``table_access`` reads and repairs them outside Spark for the on-call
operations."""
