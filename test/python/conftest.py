"""Test-wide setup: the development scripts in ``scripts/`` (not installed with
the package) are importable by their file names, e.g. ``import fuzz_diff``."""

import os
import sys

# No triton in the test process (set FALCON_TEST_ALLOW_TRITON to allow it).
# TensorFlow (imported by keras-hub in the main job's tests) and triton both
# ship LLVM; importing triton in a process that has already imported
# TensorFlow aborts it ("LLVM ERROR: inconsistency in registered CommandLine
# options"), and torch._dynamo (imported by iree-turbine in the torch frontend
# tests) imports triton whenever it is installed. falcon compiles its Triton
# kernels in a child process, so this process never needs triton. With None
# in sys.modules, `import triton` raises ImportError here and torch treats
# triton as absent.
if "FALCON_TEST_ALLOW_TRITON" not in os.environ:
    sys.modules.setdefault("triton", None)

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "scripts")
if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)
