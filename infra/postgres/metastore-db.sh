#!/usr/bin/env bash
# The catalog's metastore database beside Airflow's, on the stack's PostgreSQL: its own role and
# database. Run by the postgres image once, when it initialises an empty data directory. The
# password comes from the compose secret and reaches psql as a variable (quoted by psql itself),
# never as a command-line argument.
set -euo pipefail
password=$(<"${METASTORE_DB_PASSWORD_FILE:?set METASTORE_DB_PASSWORD_FILE to the metastore password file}")
psql -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:?}" --dbname postgres --set=password="$password" <<'SQL'
CREATE ROLE metastore LOGIN PASSWORD :'password';
CREATE DATABASE metastore OWNER metastore;
SQL
