"""Apache Kafka itself, run from its Maven Central jars: the three-broker KRaft cluster
of the tests, the benchmarks and the broker game days (``pom.xml`` is the pin;
``python -m probe.apache_kafka install``, run by ``make kafka``, resolves it)."""
