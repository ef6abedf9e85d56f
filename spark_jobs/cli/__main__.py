"""``python -m spark_jobs.cli``, and the file spark-submit runs (the deploy DAG's jobs)."""

import os
import sys

# Run as a file (spark-submit), this folder is first on sys.path: its modules (jobs.py,
# tables.py ...) must not stand in for top-level ones of the same name.
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

from spark_jobs.cli.main import main  # noqa: E402

sys.exit(main())
