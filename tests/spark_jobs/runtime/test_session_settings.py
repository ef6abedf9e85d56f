"""The pipeline prepares its jobs in threads of one session, each setting the session's SQL
settings while another may be using Delta for the first time. A Delta setting set while
Delta registers its settings is refused by Spark; once a job's settings are applied, Delta's
must all be registered, so no later thread can meet them half done. Checked in a JVM of its
own: the suite's session used Delta long ago."""

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import tempfile
    from spark_jobs.config import load_settings
    from spark_jobs.runtime.spark import configure_session, get_spark

    settings = load_settings(env={}, overrides={"data_dir": tempfile.mkdtemp(), "jit": "quick"})
    spark = get_spark(settings, "settings-probe")
    sql_conf = getattr(getattr(spark._jvm.org.apache.spark.sql.internal, "SQLConf$"), "MODULE$")
    configure_session(spark, settings)
    # what Spark asks before it accepts a setting: a name it knows must be a SQL setting
    key = "spark.databricks.delta.stalenessLimit"
    print(sql_conf.containsConfigKey(key), spark.conf.get("spark.databricks.delta.snapshotPartitions"))
""")


def test_delta_settings_are_registered_once_a_job_s_settings_are_applied():
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    registered, partitions = result.stdout.split()
    assert registered == "True"
    assert partitions == "2"
