// RUN: falcon-opt %s --lcma-rewrite --lcma-report=%t.json | FileCheck %s
// RUN: FileCheck %s --check-prefix=REPORT --input-file=%t.json

// The interim auto rule: winograd, one level, for M, N, K >= 1024 with a
// float accumulator narrower than f64; everything else stays classical.

// CHECK-LABEL: func.func @big
// CHECK-COUNT-7: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<512x512xf32>, tensor<512x1024xf32>)
// CHECK-LABEL: func.func @small
// CHECK: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<1x1024xf32>, tensor<1024x1024xf32>)
// CHECK-LABEL: func.func @wide
// CHECK: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<1024x1024xf64>, tensor<1024x1024xf64>)

// REPORT: "location": "{{.*}}auto.mlir:23:8"
// REPORT: "kind": "matmul"
// REPORT: "M": 1024,
// REPORT: "N": 2048,
// REPORT: "K": 1024,
// REPORT: "schemes": [
// REPORT-NEXT: "winograd"
// REPORT: "reason": "auto: M, N, K >= 1024
func.func @big(%a: tensor<1024x1024xf32>, %b: tensor<1024x2048xf32>, %c: tensor<1024x2048xf32>) -> tensor<1024x2048xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<1024x1024xf32>, tensor<1024x2048xf32>) outs(%c : tensor<1024x2048xf32>) -> tensor<1024x2048xf32>
  return %0 : tensor<1024x2048xf32>
}
// REPORT: "M": 1,
// REPORT: "plan": "classical"
// REPORT: "reason": "auto: min(M, N, K) = 1 < 1024
func.func @small(%a: tensor<1x1024xf32>, %b: tensor<1024x1024xf32>, %c: tensor<1x1024xf32>) -> tensor<1x1024xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<1x1024xf32>, tensor<1024x1024xf32>) outs(%c : tensor<1x1024xf32>) -> tensor<1x1024xf32>
  return %0 : tensor<1x1024xf32>
}
// REPORT: "plan": "classical"
// REPORT: "reason": "auto: f64 stays classical
func.func @wide(%a: tensor<1024x1024xf64>, %b: tensor<1024x1024xf64>, %c: tensor<1024x1024xf64>) -> tensor<1024x1024xf64> {
  %0 = linalg.matmul ins(%a, %b : tensor<1024x1024xf64>, tensor<1024x1024xf64>) outs(%c : tensor<1024x1024xf64>) -> tensor<1024x1024xf64>
  return %0 : tensor<1024x1024xf64>
}
