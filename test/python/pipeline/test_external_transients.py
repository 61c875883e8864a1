"""falcon_mlir.runner: IREE's external transients (with_external_transients, Module.call_with_transients):
the rewritten function's text, its stated transient size, values against float64 over repeated calls,
and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

from falcon_mlir.runner import Module, compile_mlir, with_external_transients

# Two matmuls: the first's 48 x 40 f32 result is a transient between two dispatches.
TWO_MATMULS = """func.func public @main(%a: tensor<48x32xf32>, %b: tensor<32x40xf32>, %c: tensor<40x24xf32>) -> (tensor<48x24xf32> {jax.result_info = "result"}) {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<48x40xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<48x40xf32>) -> tensor<48x40xf32>
  %m = linalg.matmul ins(%a, %b : tensor<48x32xf32>, tensor<32x40xf32>) outs(%z : tensor<48x40xf32>) -> tensor<48x40xf32>
  %e2 = tensor.empty() : tensor<48x24xf32>
  %z2 = linalg.fill ins(%c0 : f32) outs(%e2 : tensor<48x24xf32>) -> tensor<48x24xf32>
  %r = linalg.matmul ins(%m, %c : tensor<48x40xf32>, tensor<40x24xf32>) outs(%z2 : tensor<48x24xf32>) -> tensor<48x24xf32>
  return %r : tensor<48x24xf32>
}
func.func private @helper(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
"""


def test_text_gets_the_storage_argument_and_the_result_through_it():
    out = with_external_transients(TWO_MATMULS)
    head = out.splitlines()[0]
    assert head.endswith("%c: tensor<40x24xf32>, %falcon_transients: !hal.buffer {iree.abi.transients}) -> "
                         '(tensor<48x24xf32> {jax.result_info = "result"}) {'), head
    assert ("  %falcon_transients_result = hal.tensor.transients %r : tensor<48x24xf32> from %falcon_transients : "
            "!hal.buffer\n  return %falcon_transients_result : tensor<48x24xf32>\n}") in out
    assert "func.func private @helper(%x: tensor<4xf32>) -> tensor<4xf32> {\n  return %x" in out  # untouched


def test_calls_reuse_one_buffer_and_compute_the_product():
    mod = Module(compile_mlir(with_external_transients(TWO_MATMULS)))
    assert mod.transients_size("main") >= 48 * 40 * 4  # the intermediate product at least
    rng = np.random.default_rng(3)
    outs = []
    for _ in range(3):  # a new product each call through the same storage
        a, b, c = (rng.standard_normal(s, dtype=np.float32) for s in ((48, 32), (32, 40), (40, 24)))
        ref = (a.astype(np.float64) @ b) @ c
        out = mod.call_with_transients("main", *mod.on_device(a, b, c))
        assert out.shape == (48, 24)
        assert np.abs(out - ref).max() / np.abs(ref).max() < 1e-5
        outs.append(out)
    assert not np.array_equal(outs[0], outs[1])


@pytest.mark.parametrize("text, func, message", [
    (TWO_MATMULS, "mm", "no func.func @mm"),
    (TWO_MATMULS.replace("-> (tensor<48x24xf32> {jax.result_info = \"result\"})", "-> (i32, tensor<48x24xf32>)"),
     "main", "@main has not one tensor result"),
    (TWO_MATMULS.replace("  return %r : tensor<48x24xf32>\n",
                         "  cf.br ^bb1\n^bb1:\n  return %r : tensor<48x24xf32>\n  return %r : tensor<48x24xf32>\n"),
     "main", "@main needs exactly one return of one tensor"),
])
def test_refusals(text, func, message):
    with pytest.raises(ValueError, match=message):
        with_external_transients(text, func)


def test_a_function_without_transients_is_refused_by_name():
    mod = Module(compile_mlir(TWO_MATMULS))
    assert mod.transients_size("main") is None
    rng = np.random.default_rng(4)
    a, b, c = (rng.standard_normal(s, dtype=np.float32) for s in ((48, 32), (32, 40), (40, 24)))
    with pytest.raises(ValueError, match="function 'main' states no constant transient size"):
        mod.call_with_transients("main", *mod.on_device(a, b, c))


def test_region_returns_of_other_dialects_are_not_the_functions():
    """A reduction region's ``stablehlo.return`` is not a second return of the function."""
    text = """func.func @main(%x: tensor<8x4xf32>) -> tensor<8xf32> {
  %c = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %r = stablehlo.reduce(%x init: %c) across dimensions = [1] : (tensor<8x4xf32>, tensor<f32>) -> tensor<8xf32>
   reducer(%a: tensor<f32>, %b: tensor<f32>) {
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }
  return %r : tensor<8xf32>
}
"""
    out = with_external_transients(text)
    assert "    stablehlo.return %s : tensor<f32>\n" in out
    assert out.endswith("  %falcon_transients_result = hal.tensor.transients %r : tensor<8xf32> from %falcon_transients : "
                        "!hal.buffer\n  return %falcon_transients_result : tensor<8xf32>\n}\n")


ONE_LINE = """func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> { return %a : tensor<4xf32> }
func.func @other(%b: tensor<4xf32>) -> tensor<4xf32> {
  return %b : tensor<4xf32>
}
"""


def test_the_named_function_is_rewritten_whatever_its_layout():
    """Were (break-it review): a one-line body put the result op into the next function; a nested
    ``<...>`` in the result type was cut short; ``func.return`` was refused; ``@main( )`` got a comma."""
    out = with_external_transients(ONE_LINE)
    assert out.startswith("func.func @main(%a: tensor<4xf32>, %falcon_transients: !hal.buffer {iree.abi.transients}) "
                          "-> tensor<4xf32> { %falcon_transients_result = hal.tensor.transients %a : tensor<4xf32> "
                          "from %falcon_transients : !hal.buffer\n  return %falcon_transients_result : "
                          "tensor<4xf32> }\nfunc.func @other(%b: tensor<4xf32>) -> tensor<4xf32> {\n  return %b")
    enc = ('func.func @main(%a: tensor<4xf32, #e<1>>) -> (tensor<4xf32, #e<1>> {x.y = "r(>"}) attributes {z = 1} {\n'
           '  func.return %a : tensor<4xf32, #e<1>> loc("q")\n}\n')
    out = with_external_transients(enc)
    assert ('  func.return' not in out and
            "hal.tensor.transients %a : tensor<4xf32, #e<1>> from %falcon_transients : !hal.buffer\n"
            '  return %falcon_transients_result : tensor<4xf32, #e<1>> loc("q")\n}\n') in out, out
    assert "attributes {z = 1} {" in out
    empty = "func.func @main( ) -> tensor<2xf32> {\n  %c = arith.constant dense<1.5> : tensor<2xf32>\n  return %c : tensor<2xf32>\n}\n"
    assert with_external_transients(empty).startswith(
        "func.func @main(%falcon_transients: !hal.buffer {iree.abi.transients}) -> tensor<2xf32> {")


@pytest.mark.parametrize("text, message", [
    ('func.func @main(%a: tensor<4xf32> {x.y = "f("}) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n',
     "the text ends inside a bracket"),
    (with_external_transients(ONE_LINE), "@main has the transients argument already"),
])
def test_unbalanced_or_repeated_text_is_one_clear_error(text, message):
    with pytest.raises(ValueError, match=message):
        with_external_transients(text)


def test_calls_with_the_wrong_inputs_are_refused_by_name():
    mod = Module(compile_mlir(with_external_transients(TWO_MATMULS)))
    rng = np.random.default_rng(5)
    a, b, c = (rng.standard_normal(s, dtype=np.float32) for s in ((48, 32), (32, 40), (40, 24)))
    with pytest.raises(ValueError, match="function 'main' takes 3 inputs besides its transient storage, got 2"):
        mod.call_with_transients("main", *mod.on_device(a, b))
    with pytest.raises(TypeError, match="the inputs must be device arrays"):
        mod.call_with_transients("main", a, b, c)
    with pytest.raises(ValueError, match="the module has no function 'nosuch'"):
        mod.transients_size("nosuch")
