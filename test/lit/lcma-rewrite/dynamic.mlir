// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen chunk=64" --lcma-report=%t.json --canonicalize --cse | FileCheck %s
// RUN: FileCheck %s --check-prefix=REPORT --input-file=%t.json
// RUN: falcon-opt %s --lcma-rewrite --lcma-report=%t.auto.json -o /dev/null
// RUN: FileCheck %s --check-prefix=AUTO --input-file=%t.auto.json

// Run-time dispatch on a dynamic M: scf.if on M >= threshold; then chunks of
// 64 rows (static) through the plan in an scf.for, the remaining M mod 64
// rows classical; else the original op. A dynamic N or K stays classical.

// CHECK-LABEL: func.func @mm
// CHECK-SAME: %[[A:[a-z0-9]+]]: tensor<?x96xf32>, %[[B:[a-z0-9]+]]: tensor<96x96xf32>, %[[C:[a-z0-9]+]]: tensor<?x96xf32>
// CHECK-DAG: %[[C0:.+]] = arith.constant 0 : index
// CHECK-DAG: %[[C64:.+]] = arith.constant 64 : index
// CHECK: %[[M:.+]] = tensor.dim %[[A]], %[[C0]] : tensor<?x96xf32>
// CHECK: %[[USE:.+]] = arith.cmpi sge, %[[M]], %[[C64]] : index
// CHECK: %[[R:.+]] = scf.if %[[USE]] -> (tensor<?x96xf32>) {
// CHECK: %[[Q:.+]] = arith.divui %[[M]], %[[C64]] : index
// CHECK: %[[FULL:.+]] = arith.muli %[[Q]], %[[C64]] : index
// CHECK: %[[LOOP:.+]] = scf.for %[[I:.+]] = %[[C0]] to %[[FULL]] step %[[C64]] iter_args(%[[ACC:.+]] = %[[C]]) -> (tensor<?x96xf32>) {
// CHECK: tensor.extract_slice %[[A]][%[[I]], 0] [64, 96] [1, 1] : tensor<?x96xf32> to tensor<64x96xf32>
// CHECK: tensor.extract_slice %[[ACC]][%[[I]], 0] [64, 96] [1, 1] : tensor<?x96xf32> to tensor<64x96xf32>
// CHECK-COUNT-7: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<32x48xf32>, tensor<48x48xf32>) outs(%{{.+}} : tensor<32x48xf32>)
// CHECK-NOT: linalg.matmul
// CHECK: %[[DONE:.+]] = tensor.insert_slice %{{.+}} into %[[ACC]][%[[I]], 0] [64, 96] [1, 1] : tensor<64x96xf32> into tensor<?x96xf32>
// CHECK-NEXT: scf.yield %[[DONE]] : tensor<?x96xf32>
// CHECK-NEXT: }
// CHECK: %[[REST:.+]] = arith.subi %[[M]], %[[FULL]] : index
// CHECK: %[[AT:.+]] = tensor.extract_slice %[[A]][%[[FULL]], 0] [%[[REST]], 96] [1, 1] : tensor<?x96xf32> to tensor<?x96xf32>
// CHECK: %[[CT:.+]] = tensor.extract_slice %[[LOOP]][%[[FULL]], 0] [%[[REST]], 96] [1, 1]
// CHECK: %[[T:.+]] = linalg.matmul ins(%[[AT]], %[[B]] : tensor<?x96xf32>, tensor<96x96xf32>) outs(%[[CT]] : tensor<?x96xf32>)
// CHECK: %[[TI:.+]] = tensor.insert_slice %[[T]] into %[[LOOP]][%[[FULL]], 0] [%[[REST]], 96] [1, 1]
// CHECK: scf.yield %[[TI]] : tensor<?x96xf32>
// CHECK: } else {
// CHECK-NEXT: %[[O:.+]] = linalg.matmul ins(%[[A]], %[[B]] : tensor<?x96xf32>, tensor<96x96xf32>) outs(%[[C]] : tensor<?x96xf32>)
// CHECK-NEXT: scf.yield %[[O]] : tensor<?x96xf32>
// CHECK: return %[[R]] : tensor<?x96xf32>

// REPORT: "location": "{{.*}}dynamic.mlir:[[# @LINE + 15]]:8"
// REPORT: "M": null,
// REPORT-NEXT: "N": 96,
// REPORT-NEXT: "K": 96,
// REPORT: "schemes": [
// REPORT-NEXT: "strassen"
// REPORT: "reason": "dynamic M: run-time dispatch, M >= 64 in chunks of 64 rows through the plan (scheme forced by option (strassen))
// REPORT: "remark": false,
// REPORT-NEXT: "dispatch": {
// REPORT-NEXT: "threshold_M": 64,
// REPORT-NEXT: "chunk_M": 64
// REPORT: "products": 8,
// AUTO: "plan": "classical",
// AUTO-NEXT: "reason": "dynamic M: auto keeps it classical at every M (no chunk size in 256, 512, 1024, 2048, 4096, 8192 is predicted faster through a plan)"
func.func @mm(%a: tensor<?x96xf32>, %b: tensor<96x96xf32>, %c: tensor<?x96xf32>) -> tensor<?x96xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<?x96xf32>, tensor<96x96xf32>) outs(%c : tensor<?x96xf32>) -> tensor<?x96xf32>
  return %0 : tensor<?x96xf32>
}

// A zero-filled accumulator is re-filled per chunk (the chunk does not read
// the loop-carried tensor); the batch dimension stays whole.
// CHECK-LABEL: func.func @bmm_fill
// CHECK: scf.if
// CHECK: scf.for
// CHECK: %[[E:.+]] = tensor.empty() : tensor<2x64x24xf32>
// CHECK-NEXT: linalg.fill ins(%{{.+}} : f32) outs(%[[E]] : tensor<2x64x24xf32>)
// CHECK-COUNT-7: linalg.batch_matmul ins(%{{.+}}, %{{.+}} : tensor<2x32x8xf32>, tensor<2x8x12xf32>)
// CHECK: scf.yield
// CHECK: linalg.batch_matmul ins(%{{.+}}, %{{.+}} : tensor<2x?x16xf32>, tensor<2x16x24xf32>)
// CHECK: } else {
// CHECK-NEXT: linalg.batch_matmul ins(%{{.+}}, %{{.+}} : tensor<2x?x16xf32>, tensor<2x16x24xf32>)
// REPORT: "chunk_M": 64
func.func @bmm_fill(%a: tensor<2x?x16xf32>, %b: tensor<2x16x24xf32>) -> tensor<2x?x24xf32> {
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  %m = tensor.dim %a, %c1 : tensor<2x?x16xf32>
  %e = tensor.empty(%m) : tensor<2x?x24xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<2x?x24xf32>) -> tensor<2x?x24xf32>
  %0 = linalg.batch_matmul ins(%a, %b : tensor<2x?x16xf32>, tensor<2x16x24xf32>) outs(%c : tensor<2x?x24xf32>) -> tensor<2x?x24xf32>
  return %0 : tensor<2x?x24xf32>
}

// A dynamic batch: a loop over the batch, one element (static M, N, K) at a time.
// CHECK-LABEL: func.func @bmm_batch
// CHECK: %[[BN:.+]] = tensor.dim %{{.+}}, %{{.+}} : tensor<?x8x6xf32>
// CHECK: arith.cmpi sge, %[[BN]], %{{.+}} : index
// CHECK: scf.for
// CHECK: tensor.extract_slice %{{.+}}[%{{.+}}, 0, 0] [1, 6, 4] [1, 1, 1] : tensor<?x6x4xf32> to tensor<1x6x4xf32>
// CHECK-COUNT-7: linalg.batch_matmul ins(%{{.+}}, %{{.+}} : tensor<1x4x3xf32>, tensor<1x3x2xf32>)
// REPORT: "batch": [
// REPORT-NEXT: null
// REPORT: "threshold_batch": 1,
// REPORT-NEXT: "chunk_batch": 1
func.func @bmm_batch(%a: tensor<?x8x6xf32>, %b: tensor<?x6x4xf32>, %c: tensor<?x8x4xf32>) -> tensor<?x8x4xf32> {
  %0 = linalg.batch_matmul ins(%a, %b : tensor<?x8x6xf32>, tensor<?x6x4xf32>) outs(%c : tensor<?x8x4xf32>) -> tensor<?x8x4xf32>
  return %0 : tensor<?x8x4xf32>
}

// CHECK-LABEL: func.func @dyn_k
// CHECK-NOT: scf.if
// CHECK: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x?xf32>, tensor<?x4xf32>)
// REPORT: "K": null,
// REPORT: "plan": "classical",
// REPORT-NEXT: "reason": "dynamic K: run-time dispatch serves a dynamic M or batch dimension only; stays classical"
// REPORT: "remark": true
func.func @dyn_k(%a: tensor<8x?xf32>, %b: tensor<?x4xf32>, %c: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<8x?xf32>, tensor<?x4xf32>) outs(%c : tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// The LLM case under auto: the cost model picks the chunk (and threshold).
// AUTO: "reason": "dynamic M: run-time dispatch, M >= [[T:[0-9]+]] in chunks of [[T]] rows through the plan (auto: {{.*}} predicted {{.*}} vs classical
// AUTO: "remark": false,
// AUTO-NEXT: "dispatch": {
// AUTO-NEXT: "threshold_M": [[T]],
// AUTO-NEXT: "chunk_M": [[T]]
func.func @llm(%a: tensor<?x4096xf32>, %b: tensor<4096x4096xf32>, %c: tensor<?x4096xf32>) -> tensor<?x4096xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<?x4096xf32>, tensor<4096x4096xf32>) outs(%c : tensor<?x4096xf32>) -> tensor<?x4096xf32>
  return %0 : tensor<?x4096xf32>
}
