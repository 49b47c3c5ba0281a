"""`sla-probe reconcile`: prove every record of a topic reached its table, by count
and checksum, per window and partition.

The pure core (no I/O, no clock, no Spark): :mod:`probe.reconcile.windows` (which
offsets of which partition are compared, and which cannot be), and
:mod:`probe.reconcile.outcome` (what a comparison found, and what a run concludes).
The Spark job that counts and checksums on the executors is
:mod:`probe.reconcile.job`; a run of it (its settings, Spark session, report table and
metrics), :mod:`probe.reconcile.reconciler`. The command around it, once or as a
service, is :mod:`probe.services.reconcile`.
"""
