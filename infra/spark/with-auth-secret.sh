#!/usr/bin/env bash
# Spark's shared-secret authentication on a standalone cluster: the master, every worker
# and every driver must hold the same spark.authenticate.secret in their configuration. It
# is read from a file (a compose secret) into a configuration folder only this user reads,
# so it never appears on a command line or in the image; then the command runs.
set -euo pipefail
umask 077
conf_dir="${SPARK_CONF_DIR:?set SPARK_CONF_DIR to a folder of this container}"
mkdir -p "$conf_dir"
defaults="${SPARK_HOME:?}/conf/spark-defaults.conf"
if [ -f "$defaults" ]; then cp "$defaults" "$conf_dir/spark-defaults.conf"; else : > "$conf_dir/spark-defaults.conf"; fi
secret=$(<"${SPARK_AUTH_SECRET_FILE:?set SPARK_AUTH_SECRET_FILE to the shared secret file}")
printf 'spark.authenticate true\nspark.authenticate.secret %s\n' "$secret" >> "$conf_dir/spark-defaults.conf"
exec "$@"
