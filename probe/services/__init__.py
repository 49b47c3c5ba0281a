"""The probe's own commands as services: ``run`` and ``once``.

``run`` is the long-running probe (its targets, the Spark sink beside them, the
endpoints); ``once`` the smoke test, with its report (``report``), its JUnit
(``junit_report``) and its push to a Pushgateway (``smoke_push``). The other
services have packages of their own (``probe.reconcile``, ``probe.gameday``, the
standalone sink in ``probe.spark.standalone``); what they all serve over HTTP is
``probe.endpoints``, and the command line (``probe.cli``) sits on top.
"""
