"""``--version`` on every falcon tool: falcon-mlir's version and the IREE
compiler and runtime it runs on, exit status 0, nothing else done (as
``iree-compile --version`` and ``mlir-opt --version``)."""

from __future__ import annotations

from importlib import metadata

import pytest

from falcon_mlir import __version__
from falcon_mlir.tools import falcon_bench, falcon_calibrate, falcon_catalog, falcon_compile, falcon_opt

TOOLS = {"falcon-opt": falcon_opt, "falcon-compile": falcon_compile, "falcon-bench": falcon_bench,
         "falcon-calibrate": falcon_calibrate, "falcon-catalog": falcon_catalog}


@pytest.mark.parametrize("prog", sorted(TOOLS))
def test_version_names_falcon_and_iree(prog, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # before and after other arguments: --version wins, as in argparse and iree-compile
    for argv in (["--version"], ["in.mlir", "-o", "out.vmfb", "--version"] if prog == "falcon-compile"
                 else ["--version"]):
        assert TOOLS[prog].main(argv) == 0
        out, err = capsys.readouterr()
        assert err == ""
        assert out.splitlines() == [
            f"{prog} (falcon-mlir {__version__})",
            f"  iree-base-compiler {metadata.version('iree-base-compiler')}, "
            f"iree-base-runtime {metadata.version('iree-base-runtime')}"]
    assert list(tmp_path.iterdir()) == []  # nothing compiled or written


def test_subcommands_take_no_version(capsys):
    """Only the tool takes --version: a subcommand's parser reports it as an unknown argument."""
    assert falcon_catalog.main(["list", "--version"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("falcon-catalog: error: unrecognized arguments: --version")


@pytest.mark.parametrize("prog", sorted(TOOLS))
@pytest.mark.parametrize("stdout", ["closed", "full"])
@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_to_an_unwritable_stdout_are_one_line(prog, stdout, flag):
    """Were (break-it): ``PROG --version >&-`` and ``PROG --version > /dev/full`` printed "internal
    error: AttributeError ..." / "OSError: [Errno 28] ..." with "please report this", status 2
    (falcon-compile 1); now one line saying stdout cannot be written, status 1, as for the tools'
    other output. The same for ``--help``, which was falcon-compile's internal error and the other
    tools' silent status 0 (argparse's help, flushed at exit)."""
    import os
    import subprocess
    import sys

    if stdout == "full" and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    module = TOOLS[prog].__name__
    sink = open("/dev/full", "wb") if stdout == "full" else None
    try:  # closed: fd 1 shut before the child's Python starts (sys.stdout is None), as ``>&-`` does
        r = subprocess.run([sys.executable, "-m", module, flag], stdout=sink, stderr=subprocess.PIPE,
                           preexec_fn=(lambda: os.close(1)) if stdout == "closed" else None, timeout=300)
    finally:
        if sink is not None:
            sink.close()
    err = r.stderr.decode()
    reason = "it is closed" if stdout == "closed" else "No space left on device"
    assert (r.returncode, err) == (1, f"{prog}: error: cannot write to stdout: {reason}\n")
