"""A job's checkpoint and who may write it: ``directory`` reads (and for on-call tools edits)
Spark's checkpoint files, ``lease`` admits one writer at a time beside it, ``guards`` are
what a run checks there before it starts, and ``storage`` reads them patiently (a read the
storage fails is never taken for a file that is not there)."""
