"""``sigflow``: the command line every DAG task and every runbook step uses. One module per
command group, each adding its commands to the parser (``register``) and holding their
handlers; ``main`` runs one."""

from spark_jobs.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
