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
- Every test runs with ``$FALCON_KERNEL_CACHE`` on a fresh folder of the
  session (``kernel_cache``), whatever the order or the pytest-xdist worker:
  the user's ~/.cache/falcon-mlir stays out.
"""

import os
import sys

import pytest

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


@pytest.fixture(scope="session", autouse=True)
def kernel_cache(tmp_path_factory):
    """Point $FALCON_KERNEL_CACHE at a fresh folder for this session (the user's cache stays out), for
    every test: falcon's Triton kernels and CPU kernel objects (``$FALCON_KERNEL_CACHE/cpu``) go there.

    Was test/python/kernels/conftest.py's: a session fixture set up by the first kernels/ test and
    kept to the end, so the tests after it in one process used this folder and the tests before it,
    or in a pytest-xdist worker that drew no kernels/ test, wrote the user's ~/.cache/falcon-mlir
    (e.g. test_falcon_kernels_cpu.py's objects): which cache a test saw hung on the order."""
    mp = pytest.MonkeyPatch()
    path = tmp_path_factory.mktemp("falcon-kernel-cache")
    mp.setenv("FALCON_KERNEL_CACHE", str(path))
    yield path
    mp.undo()


# The `src` fixture (a temporary input file and a snapshot of it) of the
# falcon-opt, falcon-compile and lcma-rewrite bad-input tests, for every folder.
from tool_checks import src  # noqa: E402,F401
