"""The MLIR text that embeds a kernel in an IREE module, and iree-compile of it for cuda sm_80.

Most tests use a kernel with made-up cubin bytes (IREE does not look inside
the object when compiling), so they run without Triton; one uses a real cubin.
"""

from __future__ import annotations

import re

import pytest
from kernel_helpers import fake_kernel

from falcon_mlir.kernels import embed
from falcon_mlir.kernels.configs import KernelConfig
from falcon_mlir.kernels.spec import GemmSpec

SPEC = GemmSpec(256, 512, 128)


def _functions(vmfb: bytes) -> list:
    """Names of the functions a .vmfb exports (loading needs no device)."""
    import iree.runtime as rt

    return rt.VmModule.copy_buffer(rt.VmInstance(), vmfb).function_names


@pytest.fixture(scope="module")
def target():
    return embed.cuda_target_attribute()


def test_target_attribute_is_exact(target):
    assert target.startswith('#hal.executable.target<"cuda", "cuda-nvptx-fb", '
                             '{iree_codegen.target_info = #iree_gpu.target<arch = "sm_80"')
    assert target.endswith("}>") and target.count("<") == target.count(">")
    assert "max_workgroup_memory_bytes" in target
    assert embed.cuda_target_attribute(list(embed.DEFAULT_CUDA_FLAGS)) == target  # cached per flags


def test_executable_source_round_trips(target):
    """IREE prints an object without a path as ``{, data = ...}``, which does not
    parse back; ours names one, so printed modules (falcon-opt's output) parse."""
    from iree.compiler import ir
    text = embed.executable_source(fake_kernel(SPEC), target, "exe")
    with ir.Context():
        printed = str(ir.Module.parse("module {\n" + text + "\n}"))
    assert "{, data" not in printed and 'path = "exe.cubin", data = dense<' in printed
    with ir.Context():
        ir.Module.parse(printed)


def test_executable_source_text(target):
    k = fake_kernel(SPEC)
    text = embed.executable_source(k, target, "exe")
    head = text.split("\n", 1)[0]
    assert head == "hal.executable.source private @exe <objects = #hal.executable.objects<{"
    assert f'{target} = [' in text
    assert (f'#hal.executable.object<{{path = "exe.cubin", data = dense<"0x{k.cubin.hex().upper()}"> : '
            f'vector<{len(k.cubin)}xi8>}}>]}}>> {{') in text
    assert "hal.executable.export public @falcon_gemm ordinal(0)" in text
    bindings = re.findall(r"#hal\.pipeline\.binding<storage_buffer(, ReadOnly)?>", text)
    assert bindings == [", ReadOnly", ", ReadOnly", "", "", ""]  # a, b, c, global scratch, profile scratch
    assert "constants" not in text  # no push constants: every size is compiled in
    assert f"%x = arith.constant {k.num_programs} : index" in text
    assert "hal.return %x, %c1, %c1 : index, index, index" in text
    assert (f"}} <workgroup_size = [{k.threads} : index, 1 : index, 1 : index], "
            f"workgroup_local_memory = {k.shared}>") in text


def test_dispatch_text_scratch_sizes():
    spec = GemmSpec(64, 48, 80, batch=3, trans_a=True, out_dtype="f32")
    k = fake_kernel(spec, KernelConfig.parse("32x32x16,s2,w4,g2"))
    assert k.num_programs == 3 * 2 * 2
    line = embed.dispatch_text(k, "exe")
    gs = 384 * 12  # 384 bytes per program, 12 programs (already a multiple of 128)
    assert line == ("%r:3 = flow.dispatch @exe::@falcon_gemm(%a, %b) : "
                    "(tensor<3x80x64xbf16>, tensor<3x80x48xbf16>) -> "
                    f"(tensor<3x64x48xf32>, tensor<{gs}xi8>, tensor<128xi8>)")
    assert embed.scratch_bytes(k) == (gs, 128)


def test_gemm_module_text(target):
    k = fake_kernel(SPEC)
    text = embed.gemm_module(SPEC, kernel=k, target_attr=target)
    assert text.startswith("module {\n  hal.executable.source private @falcon_gemm_")
    assert "func.func @main(%a: tensor<256x128xbf16>, %b: tensor<128x512xbf16>) -> tensor<256x512xbf16>" in text
    assert re.search(r"%r:3 = flow\.dispatch @falcon_gemm_\w+::@falcon_gemm\(%a, %b\)", text)
    assert "return %r#0 : tensor<256x512xbf16>" in text
    assert "@reference" not in text
    with pytest.raises(ValueError, match="compiled for"):
        embed.gemm_module(GemmSpec(64, 64, 64), kernel=k, target_attr=target)
    with pytest.raises(ValueError, match="compiled with"):
        embed.gemm_module(SPEC, KernelConfig.parse("64x64x32"), kernel=k, target_attr=target)


def test_reference_func_text():
    text = embed.reference_func(GemmSpec(64, 48, 80, batch=3, trans_b=True, out_dtype="bf16"))
    assert "affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>" in text  # B stored batch x N x K
    assert '"parallel", "parallel", "parallel", "reduction"' in text
    assert "arith.extf %x : bf16 to f32" in text
    assert "arith.truncf %sum : tensor<3x64x48xf32> to tensor<3x64x48xbf16>" in text


@pytest.mark.parametrize("spec", [
    SPEC,
    GemmSpec(64, 48, 80, "f16", "f16", "f32", batch=3, trans_a=True, trans_b=True),
    GemmSpec(130, 70, 96, "f32", "f32", "f32", trans_b=True),
], ids=lambda s: s.name)
def test_iree_compiles_kernel_with_iree_dispatch_beside(spec, target):
    k = fake_kernel(spec)
    text = embed.gemm_module(spec, kernel=k, target_attr=target, reference=True)
    vmfb = embed.compile_module(text)
    assert k.cubin in vmfb
    assert set(_functions(vmfb)) >= {"main", "reference"}


def test_iree_compiles_kernel_alone(target):
    k = fake_kernel(SPEC)
    vmfb = embed.compile_module(embed.gemm_module(SPEC, kernel=k, target_attr=target))
    assert k.cubin in vmfb and "main" in _functions(vmfb)


def test_real_cubin_in_vmfb(compiled, target):
    k = compiled(SPEC)
    vmfb = embed.compile_module(embed.gemm_module(SPEC, kernel=k, target_attr=target, reference=True))
    assert k.cubin in vmfb
