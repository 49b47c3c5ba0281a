"""The pure core: what a canary is, how it is signed, and how it is judged.

No I/O here: no client, no Spark, no metrics, no clock of its own (times come in as
arguments). The canary's wire format and signature (``canary``, ``keys``), the judge
and its bounded memory (``judge``, ``judge_memory``), what is wrong with a topic's
replicas and the plan that gives every broker a canary partition to lead
(``replicas``, ``leadership``), the restart strategy (``restarts``), the worst
partitions of a round (``partition_summary``), a read's offset ranges planned
(``offset_ranges``) and the error tree (``errors``). The
import contract in pyproject.toml keeps it so.
"""
