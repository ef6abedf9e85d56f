"""How a micro-batch reaches Delta: ``batch_writer`` splits a batch into the job's tables,
``concurrent_writes`` commits them at once, ``sink`` appends each exactly once per (app id,
batch id); ``schema`` creates and migrates tables; ``delta_rs`` reads and repairs them outside
Spark for the on-call operations."""
