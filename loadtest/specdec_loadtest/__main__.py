"""Entry point: ``python3 loadtest/specdec_loadtest ...`` or, with ``loadtest`` on
``PYTHONPATH``, ``python3 -m specdec_loadtest ...``."""

import os
import sys

if not __package__:  # run as a directory: import the package from its parent
    _here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0]) == _here:
        sys.path.pop(0)  # keep the package's modules from shadowing top-level names
    sys.path.insert(0, os.path.dirname(_here))

from specdec_loadtest.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
