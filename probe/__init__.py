"""synthetic-sla-probe: signed canaries judged end to end."""
