"""What every test runs under, whatever the order and the pytest-xdist worker (README's test command
runs two, ``-n 2 --dist worksteal``): state a test could otherwise inherit from whichever tests its
process ran before it."""

import os
from pathlib import Path


def test_kernel_cache_is_the_sessions_own_in_every_folder(kernel_cache):
    """Was (break-it): $FALCON_KERNEL_CACHE was set by a session fixture of test/python/kernels/ only,
    on the first kernels/ test of the process; a worker that drew none (or the tests before it)
    compiled falcon's kernels into the user's ~/.cache/falcon-mlir. This test, outside kernels/, sees
    the session's folder, and so do falcon's cache paths."""
    from falcon_mlir.kernels import aot, cpu_object

    assert os.environ["FALCON_KERNEL_CACHE"] == str(kernel_cache)
    assert cpu_object.cache_dir() == Path(kernel_cache) / "cpu"
    assert aot.cache_dir() == Path(kernel_cache)
    assert not str(kernel_cache).startswith(str(Path.home() / ".cache"))
