"""falcon-tiles: tile choices for CUDA contractions (compile only, no GPU needed)."""

from __future__ import annotations

import re

import pytest

from cases import contraction_mlir
from falcon_mlir import targets
from falcon_mlir.api import _tiles_options, compile_str
from falcon_mlir.passes.tiles import TABLES, TilesOptions, choose
from falcon_mlir.passes.lcma_rewrite import OptionError

N = 256
# (lcma option, products expected in the tiles report: op name, batch)
PLANS = {
    "classical": (None, "linalg.matmul", []),
    "strassen1-grouped": ("scheme=strassen levels=1 form=grouped", "linalg.batch_matmul", [7]),
    "strassen2-grouped": ("scheme=strassen levels=2 form=grouped", "linalg.batch_matmul", [49]),
    "strassen1-per-product": ("scheme=strassen levels=1", "linalg.matmul", []),
}


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("plan", list(PLANS))
def test_cuda_compiles_with_tiles(dtype, plan):
    lcma, op_name, batch = PLANS[plan]
    text, _ = contraction_mlir(N, N, N, lhs=dtype)
    tiles_report = []
    vmfb = targets.compile_for("cuda-sm80", text, lcma=lcma, tiles_report=tiles_report)
    assert isinstance(vmfb, bytes) and b"cuda" in vmfb
    assert tiles_report, "falcon-tiles did not run for the cuda target"
    assert all(e["tiles"] is not None for e in tiles_report), tiles_report
    assert {e["op"] for e in tiles_report} == {op_name}
    assert all(e["batch"] == batch for e in tiles_report)
    if dtype == "f16":
        assert all(e["tiles"]["mma"] == "NV_MMA_SYNC_F16_16x8x16_F16" for e in tiles_report)
    else:
        assert all("thread" in e["tiles"] for e in tiles_report)


def _configs(text, **kwargs):
    out = targets.compile_for("cuda-sm80", text, extra_args=["--compile-to=executable-configurations"],
                              **kwargs).decode()
    return re.findall(r"lowering_config<\{[^}]*\}>", out)


def test_choice_reaches_codegen():
    """The attribute survives IREE's global optimization and dispatch
    formation: the executable's config is ours, not IREE's default."""
    text, _ = contraction_mlir(N, N, N, lhs="f32")
    ours = _configs(text, lcma=None)
    assert any("thread = [8, 8, 0], workgroup = [128, 128, 0]" in c for c in ours), ours
    default = _configs(text, lcma=None, tiles="none")
    assert default and not any("workgroup = [128, 128, 0]" in c for c in default), default
    grouped = _configs(text, lcma="scheme=strassen levels=1 form=grouped")
    assert any("reduction = [0, 0, 0, 32], thread = [1, 8, 8, 0], workgroup = [1, 128, 128, 0]" in c
               for c in grouped), grouped


def test_tiles_target_resolution():
    cuda = ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"]
    cpu = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu"]
    assert _tiles_options("auto", cuda).target == "cuda-sm80"
    assert _tiles_options("auto", cpu) is None
    assert _tiles_options("none", cuda) is None and _tiles_options(None, cuda) is None
    assert _tiles_options("target=cuda-sm80", cpu).target == "cuda-sm80"
    assert _tiles_options("auto prefer=simt64x64,mma64x64", cuda).prefer == ("simt64x64", "mma64x64")
    with pytest.raises(OptionError):
        _tiles_options("sm_90", cuda)
    with pytest.raises(OptionError):
        _tiles_options("prefer=huge", cuda)


def test_cpu_compile_untouched():
    text, _ = contraction_mlir(64, 64, 64, lhs="f32")
    rep = []
    compile_str(text, extra_args=["--iree-llvmcpu-target-cpu=host"], lcma=None, tiles_report=rep)
    assert rep == []


def test_table_choices():
    assert choose("cuda-sm80", ("f32", "f32", "f32"), 8192, 8192, 8192)[0].name == "simt128x128"
    assert choose("cuda-sm80", ("f32", "f32", "f32"), 4096, 4096, 4096,
                  batched=True)[0].name == "simt128x128k32"
    assert choose("cuda-sm80", ("f32", "f32", "f32"), 192, 64, 64)[0].name == "simt64x64"
    assert choose("cuda-sm80", ("f16", "f16", "f16"), 4096, 4096, 4096)[0].name == "mma128x256"
    assert choose("cuda-sm80", ("f16", "f16", "f16"), 128, 128, 128)[0].name == "mma128x128"
    assert choose("cuda-sm80", ("f32", "f32", "f32"), 4096, 4096, 4096,
                  prefer="simt64x64")[0].name == "simt64x64"
    none, why = choose("cuda-sm80", ("f32", "f32", "f32"), 100, 64, 64)
    assert none is None and "not divisible" in why
    none, why = choose("cuda-sm80", ("f64", "f64", "f64"), 64, 64, 64)
    assert none is None and "no tile table" in why
    for table in TABLES.values():
        for choices in table.values():
            for c in choices:
                assert c.threads % 32 == 0 and c.threads <= 1024, c
    assert TilesOptions.parse("cuda-sm80").target == "cuda-sm80"
    with pytest.raises(OptionError):
        TilesOptions.parse("tile=1")


def test_falcon_compile_flag(tmp_path):
    from falcon_mlir.tools.falcon_compile import main, parse_args

    args = parse_args(["x.mlir", "--falcon-tiles=none", "--iree-hal-target-device=cuda"])
    assert args["tiles"] == "none" and args["iree_flags"] == ["--iree-hal-target-device=cuda"]
    text, _ = contraction_mlir(N, N, N, lhs="f32")
    src = tmp_path / "mm.mlir"
    src.write_text(text)
    outs = {}
    for tiles in ("auto", "none"):
        out = tmp_path / f"{tiles}.mlir"
        rc = main([str(src), "-o", str(out), "--no-lcma", f"--falcon-tiles={tiles}",
                   *targets.target_flags("cuda-sm80"), "--compile-to=executable-configurations"])
        assert rc == 0
        outs[tiles] = out.read_text()
    assert "workgroup = [128, 128, 0]" in outs["auto"]
    assert "workgroup = [128, 128, 0]" not in outs["none"]
    assert main([str(src), "-o", str(tmp_path / "x.vmfb"), "--falcon-tiles=bogus"]) == 1


def test_gpu_check_variant_syntax():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "tools" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check_t", path)
    gc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gc)
    assert gc.split_variant(None) == (None, "target=none")
    assert gc.split_variant("scheme=strassen levels=1") == ("scheme=strassen levels=1", "target=none")
    assert gc.split_variant("classical tiles") == (None, "target=auto")
    assert gc.split_variant("scheme=strassen form=grouped tiles=cuda-sm80 prefer=simt64x64") == \
        ("scheme=strassen form=grouped", "target=cuda-sm80 prefer=simt64x64")


def test_cuda_compiles_odd_and_dynamic_shapes_with_falcons_cuda_defaults():
    """On CUDA (IREE 3.13) peeled strips and the run-time dispatch's dynamic slices fail
    to bufferize; falcon-compile/API pad a forced scheme and keep dynamic M classical."""
    from falcon_mlir import compile_str

    flags = ["--iree-cuda-target=sm_80"]
    odd = ("func.func @f(%a: tensor<257x256xf32>, %b: tensor<256x256xf32>, %c: tensor<257x256xf32>)"
           " -> tensor<257x256xf32> {\n  %0 = linalg.matmul ins(%a, %b : tensor<257x256xf32>, "
           "tensor<256x256xf32>) outs(%c : tensor<257x256xf32>) -> tensor<257x256xf32>\n"
           "  return %0 : tensor<257x256xf32>\n}\n")
    vmfb, report = compile_str(odd, target_backends=["cuda"], extra_args=flags,
                               lcma="scheme=strassen", return_report=True)
    assert vmfb and report[0]["plan"]["edge"] == "pad"
    dyn = odd.replace("257x", "?x")
    vmfb, report = compile_str(dyn, target_backends=["cuda"], extra_args=flags,
                               lcma="scheme=strassen chunk=128", return_report=True)
    assert vmfb and report[0]["plan"] == "classical"
    assert "run-time dispatch off" in report[0]["reason"]
