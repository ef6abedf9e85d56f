"""Stand-ins for production services on one machine: the embedded Kafka broker, Airflow standalone and the device simulator."""
