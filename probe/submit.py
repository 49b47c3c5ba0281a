"""The file to hand to spark-submit: ``sla-probe sink`` with the flags that follow it,
or ``sla-probe reconcile`` when the first of them is ``reconcile``.

spark-submit runs a Python *file*, not a console script or a module::

    spark-submit --master spark://spark:7077 \\
      $(python -c 'import probe.submit as m; print(m.__file__)') \\
      --config sink.yaml --signing-key-file keys.json
    spark-submit --master spark://spark:7077 \\
      $(python -c 'import probe.submit as m; print(m.__file__)') \\
      reconcile --config sink.yaml --signing-key-file keys.json

A file run as a script has its own directory first on ``sys.path``, where the
package's modules would shadow top-level ones of the same name (a module named
``operator`` here once hid the standard library's). The package avoids such names
(``probe/endpoints.py``, not ``http.py``), and this file takes its directory off the
path before importing anything, so a new module cannot break spark-submit again.
"""

import os
import sys


def _main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    from probe.cli import main  # noqa: PLC0415 - only once the path is safe

    # The commands that run a Spark job; without one named, the sink (as always).
    command, flags = (
        (sys.argv[1], sys.argv[2:])
        if sys.argv[1:2] in (["sink"], ["reconcile"])
        else ("sink", sys.argv[1:])
    )
    main([command, *flags], prog_name="sla-probe")


if __name__ == "__main__":
    _main()
