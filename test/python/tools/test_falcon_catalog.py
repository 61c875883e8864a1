"""falcon-catalog: list, show (also odd and composed names), verify, and its
one-line errors. (The catalog library itself: catalog/test_catalog.py.)"""

from __future__ import annotations

import json

import pytest

from falcon_mlir.catalog import load_catalog
from falcon_mlir.tools.falcon_catalog import main as cli_main

NAMES = load_catalog().names()


def test_cli_list(capsys):
    assert cli_main(["list"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["NAME", "FORMAT", "RANK"]
    for name in NAMES:
        assert name in out
    assert "strassen" in out and "winograd" in out
    assert cli_main(["list", "--format", "3x2x4", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == ["3x2x4:20"]


def test_cli_show(capsys):
    assert cli_main(["show", "strassen"]) == 0
    out = capsys.readouterr().out
    assert "2x2x2:7" in out and "stability E:       12" in out and "naive additions:   18" in out
    assert "M7" in out and "fast-matmul" in out
    assert cli_main(["show", "strassen*strassen"]) == 0
    assert "M49" in capsys.readouterr().out


def test_cli_verify(capsys):
    assert cli_main(["verify"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(NAMES) + 2
    assert out[-2].startswith("ok") and "strassen*strassen" in out[-2]
    assert out[-1].startswith(f"{len(NAMES) + 1}/{len(NAMES) + 1} schemes verified exactly")


def test_cli_errors(capsys):
    assert cli_main(["show", "nope"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "falcon-catalog: unknown scheme 'nope' (run `falcon-catalog list` for the valid names)"
    assert len(err.strip().splitlines()) == 1
    assert cli_main(["frobnicate"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert cli_main(["list", "--format", "3by4"]) == 2
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("name,rc", [
    ("5x4x3:47", 0), ("4x3x5:47", 0), ("6x3x3:40", 0), ("STRASSEN^2", 0), ("2X2X2:7", 0),
    ("strassen*3x3x3:23", 0), ("winograd*laderman", 0), ("2x2x2:07", 0),
    ("5x4x3:48", 1), ("", 1), ("  ", 1), ("strassen*", 1), ("*strassen", 1), ("^2", 1),
    ("strassen^0", 1), ("strassen^5", 1), ("strassen^-1", 1), ("strassen^2^2", 1),
    ("stráßen", 1), ("2x2x2:7-", 1), ("strassen\x00", 1), ("2x2x2:9", 1),
    ("1x1x1:1", 0), ("2x2x2:8", 0),  # classical blockings <m,k,n;mkn>: generated (issue 14)
    ("-strassen", 2),
])
def test_catalog_show_odd_names(name, rc, capsys):
    from falcon_mlir.tools.falcon_catalog import main

    assert main(["show", name]) == rc
    err = capsys.readouterr().err
    if rc:
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
