"""What operators do: deploy, status, restarts, maintenance, data quality and the report. Each command returns a result; the CLI prints it and the DAG tasks call it."""
