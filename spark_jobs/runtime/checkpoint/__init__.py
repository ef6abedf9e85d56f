"""A job's checkpoint and who may write it: ``directory`` reads (and for on-call tools edits)
Spark's checkpoint files, ``lease`` admits one writer at a time beside it, and ``guards`` are
what a run checks there before it starts."""
