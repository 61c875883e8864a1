"""A training step's backward contractions as IREE imports them: a
``dot_general`` contracted over B's last dimension (dX = dY W^T) or over A's
leading dimensions (dW = X^T dY) becomes a 2-D transpose feeding a
``linalg.matmul``; lcma-rewrite reads the operand through the transpose
(report ``through_transpose``) and the result matches float64."""

import numpy as np
import pytest

from falcon_mlir.api import compile_str
from falcon_mlir.runner import CPU_FLAGS, Module


def _t(shape):
    return "tensor<" + "x".join(map(str, shape)) + "xf32>"


FORMS = {
    # name: (A shape, B shape, contracting dims, result shape, numpy reference, operand read through)
    "dX": ((1, 40, 36), (52, 36), "[2] x [1]", (1, 40, 52), lambda a, b: a @ b.T, ["rhs"]),
    "dW": ((1, 40, 36), (1, 40, 52), "[0, 1] x [0, 1]", (36, 52), lambda a, b: a[0].T @ b[0], ["lhs"]),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_read_through_transpose(form):
    sa, sb, cd, so, ref, through = FORMS[form]
    src = (f"func.func @main(%a: {_t(sa)}, %b: {_t(sb)}) -> {_t(so)} {{\n"
           f"  %0 = stablehlo.dot_general %a, %b, contracting_dims = {cd} : ({_t(sa)}, {_t(sb)}) -> {_t(so)}\n"
           f"  return %0 : {_t(so)}\n}}")
    vm, report = compile_str(src, extra_args=CPU_FLAGS, input_type="stablehlo",
                             lcma="scheme=strassen levels=1", return_report=True)
    assert len(report) == 1 and report[0]["plan"]["schemes"] == ["strassen"]
    assert report[0]["through_transpose"] == through
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(sa, dtype=np.float32), rng.standard_normal(sb, dtype=np.float32)
    got = np.asarray(Module(vm)("main", a, b))
    want = ref(a.astype(np.float64), b.astype(np.float64)).reshape(so)
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-5
