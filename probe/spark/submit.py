"""The file to hand to spark-submit: ``sla-probe sink`` with the flags that follow it.

spark-submit runs a Python *file*, not a console script or a module::

    spark-submit --master spark://spark:7077 \\
      $(python -c 'import probe.spark.submit as m; print(m.__file__)') \\
      --config sink.yaml --signing-key-file keys.json

A file run as a script has its own directory first on ``sys.path``: no module of the
package may be named like a top-level one it imports (the metrics endpoints are
``probe/endpoints.py``, not ``http.py``, for this reason).
"""

import sys

from probe.cli import main


def _main() -> None:
    main(["sink", *sys.argv[1:]], prog_name="sla-probe")


if __name__ == "__main__":
    _main()
