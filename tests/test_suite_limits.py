"""The suite's own limits: a test that hangs ends, named, even when the code it runs has
taken over pytest-timeout's alarm."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.helpers import REPO

HANGS_AFTER_A_DAG_IMPORT = '''
import time

import pytest
from airflow.dag_processing.importers.python_importer import _timeout


@pytest.mark.timeout(2)
def test_hangs():
    with _timeout(30):  # Airflow's DAG import: its SIGALRM handler, its timer cancelled on the way out
        pass
    time.sleep(600)  # line 12
'''


def test_a_test_that_hangs_after_airflow_took_the_alarm_ends_and_prints_where(tmp_path):
    (tmp_path / "test_hangs.py").write_text(HANGS_AFTER_A_DAG_IMPORT)
    began = time.monotonic()
    ran = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                          "--rootdir", str(REPO), "-c", str(REPO / "pyproject.toml"), str(tmp_path / "test_hangs.py")],
                         cwd=REPO, capture_output=True, text=True, timeout=240)
    took = time.monotonic() - began
    assert ran.returncode != 0
    assert "+ Timeout +" in ran.stdout and 'test_hangs.py", line 12, in test_hangs' in ran.stdout, ran.stdout[-2000:]
    assert took < 120, f"the hanging test held its process {took:.0f} s"
