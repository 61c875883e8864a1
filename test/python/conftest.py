"""Test-wide setup for every folder below test/python.

- The shared helpers in ``helpers/`` (``cases``, ``tool_checks``,
  ``repo_paths``) and the development scripts in ``scripts/`` (not installed
  with the package) are importable by their file names, e.g. ``from cases
  import rewrite``, ``import fuzz_diff``.
- The test folders mirror the code (catalog/, decision/, passes/lcma_rewrite/,
  passes/falcon_tiles/, pipeline/, tools/, models/, scripts/) and have no
  ``__init__.py``: pytest imports each test file by its basename (rootdir-based
  "prepend" import mode), so every ``test_*.py`` basename must be unique
  across all folders (pytest stops with "import file mismatch" otherwise).
"""

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

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts")
for _path in (SCRIPTS, os.path.join(HERE, "helpers")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

# The `src` fixture (a temporary input file and a snapshot of it) of the
# falcon-opt, falcon-compile and lcma-rewrite bad-input tests, for every folder.
from tool_checks import src  # noqa: E402,F401
