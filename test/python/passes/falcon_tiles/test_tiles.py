"""falcon-tiles: tile choices for CUDA contractions (compile only, no GPU needed)."""

from __future__ import annotations

import re

import pytest

from cases import contraction_mlir
from falcon_mlir import targets
from falcon_mlir.api import compile_str
from falcon_mlir.pipeline.assemble import tiles_options
from falcon_mlir.passes.falcon_tiles import TABLES, TilesOptions, choose
from falcon_mlir.passes.lcma_rewrite import OptionError

N = 256
# (lcma option, products expected in the tiles report: op name, batch)
PLANS = {
    "classical": (None, "linalg.matmul", []),
    "strassen1-grouped": ("scheme=strassen levels=1 form=grouped", "linalg.batch_matmul", [7]),
    "strassen2-grouped": ("scheme=strassen levels=2 form=grouped", "linalg.batch_matmul", [49]),
    "strassen1-per-product": ("scheme=strassen levels=1", "linalg.matmul", []),
}
COMBINE = "linalg.generic (combine)"
# combine ops per plan on cuda: (count, [group dims of each, in emission order])
# grouped: combine A and B (group dim r), one fused combine C (block dims a, b);
# per-product: Strassen's 5 + 5 combined operands, then the fused combine C.
COMBINES = {
    "classical": [],
    "strassen1-grouped": [[1], [1], [0, 2]],
    "strassen2-grouped": [[1], [1], [0, 2]],
    "strassen1-per-product": [[]] * 10 + [[0, 2]],
}


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("plan", list(PLANS))
def test_cuda_compiles_with_tiles(dtype, plan):
    lcma, op_name, batch = PLANS[plan]
    if dtype == "f16" and lcma:
        # an f16 result: the plan's products accumulate in f32 and C is rounded once at
        # the end (IREE's default tiles for that widening op); sums in f16 keep the
        # products on f16 tensor cores
        lcma += " sums=input"
    text, _ = contraction_mlir(N, N, N, lhs=dtype)
    tiles_report = []
    vmfb = targets.compile_for("cuda-sm80", text, lcma=lcma, tiles_report=tiles_report)
    assert isinstance(vmfb, bytes) and b"cuda" in vmfb
    assert tiles_report, "falcon-tiles did not run for the cuda target"
    widening = [e for e in tiles_report if e["tiles"] is None]
    assert all(e["op"] == COMBINE and e["reason"].startswith("widening combine") for e in widening), widening
    assert len(widening) == (1 if dtype == "f16" and lcma else 0), widening
    products = [e for e in tiles_report if e["op"] != COMBINE]
    combines = [e for e in tiles_report if e["op"] == COMBINE and e["tiles"] is not None]
    assert {e["op"] for e in products} == {op_name}
    assert all(e["batch"] == batch for e in products)
    if dtype == "f16":
        mma = "NV_MMA_SYNC_F32_16x8x16_F16" if lcma else "NV_MMA_SYNC_F16_16x8x16_F16"
        assert all(e["tiles"]["mma"] == mma for e in products)
    else:
        assert all("thread" in e["tiles"] for e in products)
    # combines: every thread forms 16 bytes of the contiguous dim for all group indices
    assert [e["group_dims"] for e in combines] == COMBINES[plan]
    for e in combines:
        thread, loops = e["tiles"]["thread"], e["loops"]
        group = 1
        for g in e["group_dims"]:
            group *= loops[g]
        # 16 bytes: f16 blocks, or f32 ones (f32 data; combine C of an f16 plan's f32 products)
        wide = dtype == "f32" or (lcma and e is combines[-1])
        vec = 4 if wide else 8
        while vec > 1 and group * vec > 64:  # COMBINE_MAX_PER_THREAD: narrower vectors
            vec //= 2
        assert thread[-1] == vec and (vec == 8 or wide or group > 8)
        assert group * vec <= 64
        assert [thread[g] for g in e["group_dims"]] == [loops[g] for g in e["group_dims"]]
        assert all(x == 1 for d, x in enumerate(thread[:-1]) if d not in e["group_dims"])


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
    # combine A/B: loops (row, r, col) of 128 x 7 x 128, 256 threads; fused combine C:
    # loops (a, i, b, j) of 2 x 128 x 2 x 128
    assert sum("thread = [1, 7, 4], workgroup = [8, 7, 128]" in c for c in grouped) == 2, grouped
    assert sum("thread = [2, 1, 2, 4], workgroup = [2, 8, 2, 128]" in c for c in grouped) == 1, grouped


@pytest.mark.parametrize("lcma", ["scheme=strassen levels=1 form=grouped", "scheme=strassen levels=1"])
def test_cuda_combine_c_is_one_dispatch(lcma):
    """On cuda, combine C is one dispatch over the 2 x 2 output blocks, no
    per-block dispatches; the grouped form has no slow_memcpy copies either
    (IREE 3.13 makes them of tensor.insert_slice results and, in the
    per-product form, of the bare blocks that products read)."""
    text, _ = contraction_mlir(N, N, N, lhs="f32")
    out = targets.compile_for("cuda-sm80", text, lcma=lcma,
                              extra_args=["--compile-to=executable-configurations"]).decode()
    exports = re.findall(r"hal\.executable\.export public @(\w+)", out)
    assert len([e for e in exports if "2x128x2x128" in e]) == 1, exports
    if "grouped" in lcma:
        assert not [e for e in exports if "memcpy" in e], exports
        assert len(exports) == 4, exports  # combine A, combine B, batched product, combine C
    else:  # (IREE deduplicates identical dispatches, so the rest is not counted)
        assert not [e for e in exports if re.search(r"_elementwise_256x256_", e)], exports


def test_tiles_target_resolution():
    cuda = ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"]
    cpu = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu"]
    assert tiles_options("auto", cuda).table == "cuda-sm80"
    assert tiles_options("auto", cpu) is None
    assert tiles_options("none", cuda) is None and tiles_options(None, cuda) is None
    assert tiles_options("target=cuda-sm80", cpu).table == "cuda-sm80"
    assert tiles_options("table=cuda-sm80", cpu).table == "cuda-sm80"
    assert tiles_options("auto prefer=simt64x64,mma64x64", cuda).prefer == ("simt64x64", "mma64x64")
    with pytest.raises(OptionError):
        tiles_options("sm_90", cuda)
    with pytest.raises(OptionError):
        tiles_options("prefer=huge", cuda)


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
    assert TilesOptions.parse("cuda-sm80").table == "cuda-sm80"
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


@pytest.mark.parametrize("form", ["per-product", "grouped"])
@pytest.mark.parametrize("types", [("f16", "f32"), ("bf16", "f32"), ("i8", "i32")])
def test_cuda_widening_combines_keep_iree_default(types, form):
    """Combines that widen their blocks (f16 -> f32 ...) are fused by IREE into the
    product's dispatch; a tile choice on both would fail ("multiple ops within
    dispatch trying to set the translation info"), so they keep IREE's default."""
    lhs, acc = types
    text, _ = contraction_mlir(128, 128, 128, lhs=lhs, acc=acc)
    tiles_report = []
    vmfb = targets.compile_for("cuda-sm80", text, lcma=f"scheme=strassen form={form}",
                               tiles_report=tiles_report)
    assert isinstance(vmfb, bytes)
    widening = [e for e in tiles_report if e["op"] == COMBINE and e["tiles"] is None]
    assert widening and all("widening" in e["reason"] for e in widening), tiles_report
    # the fused combine C reads products already in the accumulator type: it is tiled
    assert any(e["op"] == COMBINE and e["tiles"] for e in tiles_report), tiles_report


@pytest.mark.parametrize("form", ["per-product", "grouped"])
def test_cuda_constant_weight_combines_keep_iree_default(form):
    """Combine B of a constant B is folded by IREE's const-eval on the host, where
    a GPU tile choice does not build; it keeps IREE's default and compiles."""
    import numpy as np

    from falcon_mlir.ir.matmul_text import matmul_mlir

    vals = (np.arange(64 * 64).reshape(64, 64) % 7 - 3.0)
    dense = "dense<[" + ",".join("[" + ",".join(f"{v:.1f}" for v in row) + "]" for row in vals) + "]>"
    text = matmul_mlir(64, 64, 64, "f32", b_const=dense)
    tiles_report = []
    vmfb = targets.compile_for("cuda-sm80", text, lcma=f"scheme=strassen form={form}",
                               tiles_report=tiles_report)
    assert isinstance(vmfb, bytes)
    const = [e for e in tiles_report if e["op"] == COMBINE and e["tiles"] is None]
    assert const and all("constant" in e["reason"] for e in const), tiles_report


BAD_TAG = """func.func @f(%a: tensor<64x128xf32>, %b: tensor<64x128xf32>) -> tensor<64x128xf32> {{
  %e = tensor.empty() : tensor<64x128xf32>
  %r = linalg.generic {{indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> {out}>], iterator_types = ["parallel", "parallel"]}} ins(%a, %b : tensor<64x128xf32>, tensor<64x128xf32>) outs(%e : tensor<64x128xf32>) attrs = {{falcon.combine = {tag}}} {{
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  }} -> tensor<64x128xf32>
  return %r : tensor<64x128xf32>
}}
"""


@pytest.mark.parametrize("tag,out,why", [
    ("array<i64: 5>", "(d0, d1)", "not distinct loops"),
    ("array<i64: -1>", "(d0, d1)", "not distinct loops"),
    ("array<i64: 0, 0>", "(d0, d1)", "not distinct loops"),
    ('"x"', "(d0, d1)", "not an array"),
    ("array<i32: 0>", "(d0, d1)", "not an array"),
    ("array<i64>", "(0, d1)", "plain loop dims"),
])
def test_bad_combine_tags_are_ignored(tag, out, why):
    from falcon_mlir.passes.falcon_tiles import run_falcon_tiles
    from iree.compiler import ir

    with ir.Context():
        module = ir.Module.parse(BAD_TAG.format(tag=tag, out=out))
        report = run_falcon_tiles(module.operation, "target=cuda-sm80")
        assert "compilation_info" not in str(module)
    assert len(report) == 1 and report[0]["tiles"] is None and why in report[0]["reason"], report


def test_good_combine_tag_is_tiled():
    from falcon_mlir.passes.falcon_tiles import run_falcon_tiles
    from iree.compiler import ir

    with ir.Context():
        module = ir.Module.parse(BAD_TAG.format(tag="array<i64>", out="(d0, d1)"))
        report = run_falcon_tiles(module.operation, "target=cuda-sm80")
        assert "thread = [1, 4], workgroup = [8, 128]" in str(module)
    assert report[0]["tiles"] == {"name": "combine", "workgroup": [8, 128], "thread": [1, 4]}


def test_bf16_on_the_h200_profile_is_rated_like_f16():
    """bf16 runs on the tensor cores like f16; the h200-iree profile has no bf16
    table, so classical bf16 takes f16's rate (not f32's) and auto keeps it."""
    from falcon_mlir import decision

    p = decision.load_profile("h200-iree")
    assert p.gemm_rate("bf16", 8192, 8192, 8192) == p.gemm_rate("f16", 8192, 8192, 8192)
    d = decision.decide(decision.Problem(8192, 8192, 8192, lhs="bf16", rhs="bf16", acc="f32"), p)
    assert d.choice.is_classical, d.reason
