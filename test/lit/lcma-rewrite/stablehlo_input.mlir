// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen" -o %t.mlir 2>&1 | FileCheck %s
// RUN: FileCheck %s --check-prefix=OUT --input-file=%t.mlir

// falcon-opt does not convert frontends: on StableHLO the rewrite finds no
// linalg contraction, and says so in one remark line (exit status 0, the
// module unchanged); falcon-compile converts the input first and rewrites it.

// CHECK: stablehlo_input.mlir:[[# @LINE + 4]]:8: remark: lcma-rewrite: no contraction found: the input holds StableHLO ops (stablehlo.dot_general), which falcon-opt does not convert to linalg; use falcon-compile --lcma-rewrite=..., which converts the input first
// CHECK-NOT: remark
// OUT: stablehlo.dot_general
func.func @main(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  return %0 : tensor<64x64xf32>
}
