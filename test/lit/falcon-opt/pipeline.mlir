// RUN: falcon-opt %s --pass-pipeline="builtin.module(lcma-rewrite{scheme=strassen levels=1},canonicalize,cse)" | FileCheck %s
// RUN: falcon-opt %s --canonicalize --lcma-rewrite="scheme=strassen" --cse | FileCheck %s
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen" --mlir-print-ir-after-all -o /dev/null 2>&1 | FileCheck %s --check-prefix=PRINT

// lcma-rewrite mixes with upstream passes by name, in command-line order.

// CHECK-LABEL: func.func @p
// CHECK-COUNT-7: linalg.matmul
// CHECK-NOT: linalg.matmul
// PRINT: IR Dump After lcma-rewrite
// PRINT: linalg.matmul
func.func @p(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>, %c: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<4x4xf32>, tensor<4x4xf32>) outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}
