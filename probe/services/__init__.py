"""The probe's commands as services, a module each: what ``sla-probe <command>`` does
once its flags are parsed.

``run`` is the long-running probe (its targets, the Spark sink beside them, the
endpoints); ``once`` the smoke test, with its report (``report``), its JUnit
(``junit_report``) and its push to a Pushgateway (``smoke_push``); ``sink`` the Spark
sink stage on its own; ``reconcile`` the reconciliation once or as a service (a run
itself is ``probe.reconcile``); ``gameday`` the game days (their scenarios, faults and
runs are ``probe.gameday``); ``keygen`` the key rings, made, edited and loaded. Each
has one entry function taking the parsed settings and returning the exit code
(``run_probe``, ``run_once``, ``run_sink``, ``run_reconcile``, ``run_gamedays``,
``run_keygen``); a ConfigError, whenever found, is the command line's exit 2. What
they serve over HTTP is ``probe.endpoints``; the command line (``probe.cli``) sits
on top and only parses and wires.
"""
