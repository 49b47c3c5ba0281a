"""Tests on Apache Kafka's own three-broker KRaft cluster (probe.apache_kafka): the
fixtures ``kafka_cluster`` (shared) and ``own_kafka_cluster`` are in tests/conftest.py,
for the Spark and MQTT tests to use too."""
