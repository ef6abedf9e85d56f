"""sigflow's Airflow integration, laid out as a provider package is: ``hooks`` (the
``sigflow_kafka`` connection into sigflow's settings), ``operators`` (the restart approval
and the spark-submit of a job), ``tasks`` (what each DAG task calls: an ops function with
the task environment's settings).

dags/ only wires these together, and parses cheaply: nothing here is imported at parse time
but the operators' classes; ops/ knows nothing of Airflow.
"""
