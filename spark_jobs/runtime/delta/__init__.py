"""How a micro-batch reaches Delta (the protocol: ``spark_jobs.runtime.commit``):
``commit_info`` is the record every commit carries, ``concurrent_writes`` commits a batch's
tables at once, ``sink`` appends each exactly once per (app id, batch id) or merges a table
kept current by key; ``schema`` creates and migrates tables; ``increments`` reads what a table
gained; ``table_access`` is every read, small write and repair outside Spark (delta-rs)."""
