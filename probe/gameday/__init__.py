"""Game days: inject a fault, watch the real alerting path, measure time-to-detect.

``sla-probe gameday SCENARIO.yaml`` runs one scenario (``scenario``) in three phases,
steady, fault and recovery, either on a local environment it starts itself
(``local``: broker, probe, Prometheus with the shipped rules) with a built-in fault
(``faults``), or against a staging pipeline with the user's shell hooks
(``staging``). It watches Prometheus's alerts live (``watcher``), replays the probe's
recorded series at the production canary interval through ``promtool test rules``
(``replay``), judges the scenario's expectations on both timelines
(``verdict``) and prints the result (``report``).
"""
