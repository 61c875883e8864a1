// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen" --lcma-report=%t.json --lcma-explain -o %t.mlir 2> %t.err
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: FileCheck %s --check-prefix=REPORT --input-file=%t.json
// RUN: FileCheck %s --check-prefix=EXPLAIN --input-file=%t.err
// RUN: FileCheck %s --check-prefix=REMARK --input-file=%t.err
// RUN: falcon-opt %s --lcma-rewrite | FileCheck %s --check-prefix=AUTO

// A batch_matmul whose B has no batch dimension (the 3-D x 2-D projection
// form) has two M dimensions, batch and M: it is a matmul over batch x M. The
// rewrite folds them (collapse_shape, one linalg.matmul, expand_shape: views,
// no copies) and rewrites that matmul; the report and --lcma-explain give the
// op's sizes (M = 4 x 64 = 256), not zeros.

// CHECK-LABEL: func.func @proj
// CHECK-SAME: %[[A:[a-z0-9]+]]: tensor<4x64x96xf32>, %[[B:[a-z0-9]+]]: tensor<96x48xf32>, %[[C:[a-z0-9]+]]: tensor<4x64x48xf32>
// CHECK-DAG: %[[A2:.+]] = tensor.collapse_shape %[[A]] {{\[}}[0, 1], [2]] : tensor<4x64x96xf32> into tensor<256x96xf32>
// CHECK-DAG: %[[C2:.+]] = tensor.collapse_shape %[[C]] {{\[}}[0, 1], [2]] : tensor<4x64x48xf32> into tensor<256x48xf32>
// CHECK-DAG: tensor.extract_slice %[[A2]][128, 48] [128, 48] [1, 1] : tensor<256x96xf32> to tensor<128x48xf32>
// CHECK-COUNT-7: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<128x48xf32>, tensor<48x24xf32>) outs(%{{.+}} : tensor<128x24xf32>)
// CHECK-NOT: linalg.batch_matmul
// CHECK: %[[R2:.+]] = tensor.insert_slice %{{.+}} into %{{.+}}[128, 24] [128, 24] [1, 1] : tensor<128x24xf32> into tensor<256x48xf32>
// CHECK: %[[R:.+]] = tensor.expand_shape %[[R2]] {{\[}}[0, 1], [2]] output_shape [4, 64, 48] : tensor<256x48xf32> into tensor<4x64x48xf32>
// CHECK: return %[[R]] : tensor<4x64x48xf32>

// REPORT: "location": "{{.*}}batch_matmul_broadcast.mlir:[[# @LINE + 15]]:8"
// REPORT-NEXT: "op": "linalg.batch_matmul",
// REPORT-NEXT: "kind": "batch_matmul as matmul over M = 4 x 64",
// REPORT-NEXT: "M": 256,
// REPORT-NEXT: "N": 48,
// REPORT-NEXT: "K": 96,
// REPORT-NEXT: "batch": [],
// REPORT: "reason": "scheme forced by option (strassen)"
// REPORT: "dims": {
// REPORT-NEXT: "M": [
// REPORT-NEXT: 4,
// REPORT-NEXT: 64
// REPORT: "products": 7,
// EXPLAIN: batch_matmul_broadcast.mlir:[[# @LINE + 2]]:8: linalg.batch_matmul M=256 (4 x 64) N=48 K=96 (f32 x f32 -> f32): rewritten: strassen, 1 level(s), per-product form; 7 products, 14 combines emitted
func.func @proj(%a: tensor<4x64x96xf32>, %b: tensor<96x48xf32>, %c: tensor<4x64x48xf32>) -> tensor<4x64x48xf32> {
  %0 = linalg.batch_matmul indexing_maps = [affine_map<(b, m, n, k) -> (b, m, k)>, affine_map<(b, m, n, k) -> (k, n)>, affine_map<(b, m, n, k) -> (b, m, n)>]
         ins(%a, %b : tensor<4x64x96xf32>, tensor<96x48xf32>) outs(%c : tensor<4x64x48xf32>) -> tensor<4x64x48xf32>
  return %0 : tensor<4x64x48xf32>
}

// Kept classical (auto on the host profile: blocks not multiples of 64), the
// op is left exactly as it was: no folded view behind.
// AUTO-LABEL: func.func @proj
// AUTO-NOT: tensor.collapse_shape
// AUTO: linalg.batch_matmul indexing_maps = [#map, #map1, #map2] ins(%arg0, %arg1 : tensor<4x64x96xf32>, tensor<96x48xf32>) outs(%arg2 : tensor<4x64x48xf32>)
// AUTO-NOT: tensor.expand_shape
// AUTO-LABEL: func.func @proj_dyn
// EXPLAIN: batch_matmul_broadcast.mlir:[[# @LINE + 15]]:8: linalg.batch_matmul M=? (? x 64) N=48 K=96 (f32 x f32 -> f32): rewritten: strassen

// A dynamic batch folds into a dynamic M: the run-time dispatch serves it.
// CHECK-LABEL: func.func @proj_dyn
// CHECK: tensor.collapse_shape %{{.+}} {{\[}}[0, 1], [2]] : tensor<?x64x96xf32> into tensor<?x96xf32>
// CHECK: scf.if
// CHECK: scf.for
// CHECK-COUNT-7: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<1024x48xf32>, tensor<48x24xf32>)
// CHECK: tensor.expand_shape %{{.+}} {{\[}}[0, 1], [2]] output_shape [%{{.+}}, 64, 48] : tensor<?x48xf32> into tensor<?x64x48xf32>
// REPORT: "kind": "batch_matmul as matmul over M = ? x 64",
// REPORT-NEXT: "M": null,
// REPORT: "dispatch": {
// REPORT-NEXT: "threshold_M": 2048,
// REPORT-NEXT: "chunk_M": 2048
func.func @proj_dyn(%a: tensor<?x64x96xf32>, %b: tensor<96x48xf32>, %c: tensor<?x64x48xf32>) -> tensor<?x64x48xf32> {
  %0 = linalg.batch_matmul indexing_maps = [affine_map<(b, m, n, k) -> (b, m, k)>, affine_map<(b, m, n, k) -> (k, n)>, affine_map<(b, m, n, k) -> (b, m, n)>]
         ins(%a, %b : tensor<?x64x96xf32>, tensor<96x48xf32>) outs(%c : tensor<?x64x48xf32>) -> tensor<?x64x48xf32>
  return %0 : tensor<?x64x48xf32>
}

// A broadcast A (B and C carry the batch) puts batch and N in one role but
// not side by side in B and C: it does not fold, stays classical with its real
// sizes (N = 4 x 48 = 192) and a remark.
// REMARK: batch_matmul_broadcast.mlir:[[# @LINE + 6]]:8: remark: lcma-rewrite: several loop dimensions in one role (N = 4 x 48) that do not fold into one: its N dimensions are not adjacent in the same order in B and C
// REPORT: "kind": "batch_matmul",
// REPORT-NEXT: "M": 64,
// REPORT-NEXT: "N": 192,
// EXPLAIN: batch_matmul_broadcast.mlir:[[# @LINE + 2]]:8: linalg.batch_matmul M=64 N=192 (4 x 48) K=96 (f32 x f32 -> f32): classical
func.func @proj_a(%a: tensor<64x96xf32>, %b: tensor<4x96x48xf32>, %c: tensor<4x64x48xf32>) -> tensor<4x64x48xf32> {
  %0 = linalg.batch_matmul indexing_maps = [affine_map<(b, m, n, k) -> (m, k)>, affine_map<(b, m, n, k) -> (b, k, n)>, affine_map<(b, m, n, k) -> (b, m, n)>]
         ins(%a, %b : tensor<64x96xf32>, tensor<4x96x48xf32>) outs(%c : tensor<4x64x48xf32>) -> tensor<4x64x48xf32>
  return %0 : tensor<4x64x48xf32>
}
