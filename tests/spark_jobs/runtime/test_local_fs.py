"""sigflow's local file system (infra/localfs, runtime/classpath.py): a driver on a local
master writes Delta tables and streaming checkpoints without starting a `chmod` or `readlink`
process, and the files and answers are the ones Hadoop's own local file system gives."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from spark_jobs.config import default_jars_dir
from spark_jobs.runtime import classpath
from tests.helpers import REPO, cli_env

pytestmark = pytest.mark.slow

# Run in a driver of its own: the JVM must start with the PATH that records its processes.
DRIVER = """
import json, os, sys
from pathlib import Path
from spark_jobs.config import load_settings
from spark_jobs.runtime.spark import get_spark

work, log = Path(sys.argv[1]), Path(sys.argv[2])
os.umask(0o077)  # Hadoop sets the permission it wants itself: files must not come out 0600
spark = get_spark(load_settings(env={}, overrides={"spark_master": "local[1]", "data_dir": str(work / "data")}),
                  "local-fs-probe")
jvm, conf = spark._jvm, spark.sparkContext._jsc.hadoopConfiguration()
hadoop = jvm.org.apache.hadoop.fs

# Hadoop's own raw local file system, to show this driver's `chmod` would be seen
stock = hadoop.RawLocalFileSystem()
stock.initialize(jvm.java.net.URI("file:///"), conf)
(work / "probe").write_text("x")
stock.setPermission(hadoop.Path(str(work / "probe")), hadoop.permission.FsPermission("600"))
seen_from_stock = log.read_text().splitlines() if log.exists() else []
log.unlink(missing_ok=True)

table, copy = str(work / "table"), str(work / "copy")
for start in (0, 10):
    spark.range(start, start + 10).write.format("delta").mode("append").save(table)
query = (spark.readStream.format("delta").load(table).writeStream.format("delta")
         .option("checkpointLocation", str(work / "checkpoint")).trigger(availableNow=True).start(copy))
query.awaitTermination()

fs = hadoop.FileSystem.get(jvm.java.net.URI("file:///"), conf)
(work / "target").write_text("x")
fs.setPermission(hadoop.Path(str(work / "target")), hadoop.permission.FsPermission("640"))
started = log.read_text().splitlines() if log.exists() else []
os.symlink(work / "target", work / "link")
context = hadoop.FileContext.getFileContext(conf)
def link_status(name):
    status = context.getFileLinkStatus(hadoop.Path(str(work / name)))
    return [status.isSymlink(), status.getSymlink().toUri().getPath() if status.isSymlink() else None]
try:
    context.getFileLinkStatus(hadoop.Path(str(work / "missing")))
    missing = "found"
except Exception as e:
    missing = "FileNotFoundException" if "FileNotFoundException" in str(e) else str(e)[:300]
print(json.dumps({
    "file_system": fs.getClass().getName(),
    "seen_from_stock": seen_from_stock, "started": started,
    "rows": spark.read.format("delta").load(copy).count(),
    "link": link_status("link"), "file": link_status("target"), "missing": missing,
}))
"""

# Records each run and who started it (the JVM's threads are named "java"), then runs the tool.
WRAPPER = """#!/bin/sh
read parent < /proc/$PPID/comm
echo "$parent $(basename "$0") $*" >> {log}
exec {real} "$@"
"""


def test_a_local_driver_writes_tables_and_checkpoints_without_starting_a_process_per_file(tmp_path):
    jars = default_jars_dir()
    if not classpath.driver_class_path(jars):
        pytest.skip("sigflow's local file system is not built (make install builds it when mvn is there)")
    tools, log = tmp_path / "tools", tmp_path / "processes.log"
    tools.mkdir()
    for name in ("chmod", "readlink"):
        wrapper = tools / name
        wrapper.write_text(WRAPPER.format(log=log, real=shutil.which(name)))
        wrapper.chmod(0o755)
    env = cli_env(None, {"PATH": f"{tools}:{os.environ['PATH']}"})
    ran = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path), str(log)], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    found = json.loads(ran.stdout.strip().splitlines()[-1])

    # a symbolic link is still read by `readlink` (Hadoop's answer, kept): only before it
    started_by_java = [line for line in found["started"] if line.startswith("java ")]
    assert any(" chmod " in line for line in found["seen_from_stock"]), found["seen_from_stock"]
    assert started_by_java == [], started_by_java[:10]
    assert found["rows"] == 20
    # what Hadoop gives: a permission set is the file's mode; files it creates are 0666 less
    # its own umask (022), whatever the process's; links told from files; a missing path fails
    assert stat.S_IMODE((tmp_path / "target").stat().st_mode) == 0o640
    created = [p for p in (tmp_path / "table").rglob("*") if p.is_file()] + \
              [p for p in (tmp_path / "checkpoint").rglob("*") if p.is_file()]
    assert len(created) > 10
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in created} == {oct(0o644)}
    assert found["link"] == [True, str(tmp_path / "target")]
    assert found["file"] == [False, None]
    assert found["missing"] == "FileNotFoundException"
