// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen" --lcma-report=%t.json | FileCheck %s
// RUN: FileCheck %s --check-prefix=REPORT --input-file=%t.json

// Contractions inside scf.for and scf.if are found and rewritten in place;
// a dynamic-shaped one that run-time dispatch does not serve (dynamic N) stays
// classical with its reason in the report (dynamic M: see dynamic.mlir).

// CHECK-LABEL: func.func @loop
// CHECK: scf.for
// CHECK-COUNT-7: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<2x2xf32>, tensor<2x2xf32>)
// CHECK: scf.yield
func.func @loop(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>, %c: tensor<4x4xf32>, %n: index) -> tensor<4x4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %c) -> tensor<4x4xf32> {
    %0 = linalg.matmul ins(%a, %b : tensor<4x4xf32>, tensor<4x4xf32>) outs(%acc : tensor<4x4xf32>) -> tensor<4x4xf32>
    scf.yield %0 : tensor<4x4xf32>
  }
  return %r : tensor<4x4xf32>
}

// CHECK-LABEL: func.func @dyn
// CHECK: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<4x4xf32>, tensor<4x?xf32>)
// REPORT: "plan": "classical"
// REPORT-NEXT: "reason": "dynamic N: run-time dispatch serves a dynamic M or batch dimension only
func.func @dyn(%a: tensor<4x4xf32>, %b: tensor<4x?xf32>, %c: tensor<4x?xf32>) -> tensor<4x?xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<4x4xf32>, tensor<4x?xf32>) outs(%c : tensor<4x?xf32>) -> tensor<4x?xf32>
  return %0 : tensor<4x?xf32>
}
