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
