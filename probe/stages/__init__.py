"""Probing one target: its producer, its stages, and the target that binds them.

``producer`` writes a round of canaries, one per partition; ``stage`` is the intake
every stage shares (decode, verify, judge, record), fed by a transport's arrivals:
the consumer, group, mqtt and bridge stages are each a ``Stage`` over a transport of
``probe.transport``, and the Spark sink's executors classify records with the same
function; ``target`` is one target with its transport, producer and stages, as
``run`` and ``once`` drive it. The Spark sink stage beside the probe (its query,
restarts and freshness) is ``probe.spark.stage``, with the job it runs.
"""
