"""Test-wide setup: the development scripts in ``scripts/`` (not installed with
the package) are importable by their file names, e.g. ``import fuzz_diff``."""

import os
import sys

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "scripts")
if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)
