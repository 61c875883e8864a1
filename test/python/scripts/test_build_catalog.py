"""scripts/build_catalog.py: the committed catalog is rebuilt exactly from the
raw scheme sources, and a corrupted source fails the build (no output file).
Runs only where the sources are (``$FALCON_SHARED`` or ``../shared``)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from falcon_mlir.catalog import Catalog, load_catalog
from repo_paths import ROOT as REPO

SHARED = Path(os.environ.get("FALCON_SHARED", REPO.parent / "shared"))
SCHEMES = SHARED / "schemes"
needs_shared = pytest.mark.skipif(not SCHEMES.is_dir(), reason=f"source data not found at {SCHEMES}")

NAMES = load_catalog().names()


@needs_shared
def test_build_fails_on_corrupted_source(tmp_path, capsys):
    import build_catalog

    shared = tmp_path / "shared"
    shutil.copytree(SHARED / "schemes", shared / "schemes")
    victim = shared / "schemes/fastmatrixmultiplication/schemes/results/ZT/4x4x4_m49_ZT.json"
    d = json.loads(victim.read_text())
    d["u"][3][5] = 1 if d["u"][3][5] != 1 else 0
    victim.write_text(json.dumps(d))
    rc = build_catalog.main(["-q", "--shared", str(shared), "-o", str(tmp_path / "c.json")])
    assert rc == 1
    assert not (tmp_path / "c.json").exists()
    err = capsys.readouterr().err
    assert "4x4x4_m49_ZT.json: FAILS exact verification" in err


@needs_shared
def test_build_reproduces_data_file(tmp_path):
    import build_catalog

    out = tmp_path / "catalog.json"
    assert build_catalog.main(["-q", "--shared", str(SHARED), "-o", str(out)]) == 0
    built = json.loads(out.read_text())
    committed = Catalog(built["schemes"])
    assert committed.names() == NAMES
