"""What comes in and what goes out: the Kafka event contract and the Delta tables."""
