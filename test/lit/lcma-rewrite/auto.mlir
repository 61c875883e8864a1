// RUN: falcon-opt %s --lcma-rewrite --lcma-report=%t.json --lcma-explain 2> %t.explain | FileCheck %s
// RUN: FileCheck %s --check-prefix=REPORT --input-file=%t.json
// RUN: FileCheck %s --check-prefix=EXPLAIN --input-file=%t.explain

// The default decision: the cost model on the host profile. A large
// compute-bound product is rewritten; a mid-sized one is predicted slower
// rewritten and stays classical; a decode-sized (M = 1) product is
// memory-bound; f64 stays classical. The report carries predicted times.

// CHECK-LABEL: func.func @big
// CHECK-NOT: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<4096x4096xf32>, tensor<4096x4096xf32>)
// CHECK-COUNT-7: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<2048x2048xf32>, tensor<2048x2048xf32>)
// CHECK-LABEL: func.func @mid
// CHECK-NEXT: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<1024x1024xf32>, tensor<1024x2048xf32>)
// CHECK-LABEL: func.func @decode
// CHECK-NEXT: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<1x4096xf32>, tensor<4096x4096xf32>)
// CHECK-LABEL: func.func @wide
// CHECK-NEXT: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<4096x4096xf64>, tensor<4096x4096xf64>)

// REPORT: "location": "{{.*}}auto.mlir:31:8"
// REPORT: "M": 4096,
// REPORT: "schemes": [
// REPORT: "reason": "auto: {{.*}} predicted {{.*}} vs classical {{.*}} on host"
// REPORT: "predicted_time": {
// REPORT-NEXT: "profile": "host",
// REPORT-NEXT: "classical": {{[0-9.e-]+}},
// REPORT-NEXT: "plan": {{[0-9.e-]+}},
// REPORT-NEXT: "alternatives": [
// REPORT: "temp_bytes": {{[1-9][0-9]+}}
func.func @big(%a: tensor<4096x4096xf32>, %b: tensor<4096x4096xf32>, %c: tensor<4096x4096xf32>) -> tensor<4096x4096xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<4096x4096xf32>, tensor<4096x4096xf32>) outs(%c : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  return %0 : tensor<4096x4096xf32>
}
// REPORT: "M": 1024,
// REPORT: "plan": "classical"
// REPORT: "reason": "auto: best plan {{.*}} predicted {{.*}} vs classical {{.*}} (not {{[0-9]+}}% faster); classical"
func.func @mid(%a: tensor<1024x1024xf32>, %b: tensor<1024x2048xf32>, %c: tensor<1024x2048xf32>) -> tensor<1024x2048xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<1024x1024xf32>, tensor<1024x2048xf32>) outs(%c : tensor<1024x2048xf32>) -> tensor<1024x2048xf32>
  return %0 : tensor<1024x2048xf32>
}
// REPORT: "M": 1,
// REPORT: "plan": "classical"
// REPORT: "reason": "memory-bound: intensity {{.*}} FLOP/byte <= machine balance {{.*}} FLOP/byte on host; classical"
func.func @decode(%a: tensor<1x4096xf32>, %b: tensor<4096x4096xf32>, %c: tensor<1x4096xf32>) -> tensor<1x4096xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<1x4096xf32>, tensor<4096x4096xf32>) outs(%c : tensor<1x4096xf32>) -> tensor<1x4096xf32>
  return %0 : tensor<1x4096xf32>
}
// REPORT: "plan": "classical"
// REPORT: "reason": "auto: f64 stays classical
func.func @wide(%a: tensor<4096x4096xf64>, %b: tensor<4096x4096xf64>, %c: tensor<4096x4096xf64>) -> tensor<4096x4096xf64> {
  %0 = linalg.matmul ins(%a, %b : tensor<4096x4096xf64>, tensor<4096x4096xf64>) outs(%c : tensor<4096x4096xf64>) -> tensor<4096x4096xf64>
  return %0 : tensor<4096x4096xf64>
}

// EXPLAIN: auto.mlir:31:8: linalg.matmul M=4096 N=4096 K=4096 (f32 x f32 -> f32): rewritten:
// EXPLAIN-NEXT: why: auto:
// EXPLAIN-NEXT: predicted on host: classical {{.*}}, this plan {{.*}} ({{[0-9.]+}}x), {{[0-9]+}} dispatches, temporaries
// EXPLAIN: alternative:
// EXPLAIN: predicted error: classical {{.*}}, this plan
// EXPLAIN: auto.mlir:45:8: linalg.matmul M=1 N=4096 K=4096 (f32 x f32 -> f32): classical
// EXPLAIN-NEXT: why: memory-bound
// EXPLAIN: lcma-explain: 1 of 4 contractions rewritten; predicted
