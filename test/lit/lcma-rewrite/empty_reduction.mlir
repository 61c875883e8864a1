// RUN: falcon-opt %s --lcma-rewrite --lcma-report=%t.json --lcma-explain 2> %t.explain | FileCheck %s
// RUN: FileCheck %s --check-prefix=REPORT --input-file=%t.json
// RUN: FileCheck %s --check-prefix=EXPLAIN --input-file=%t.explain
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen" 2> %t.forced | FileCheck %s --check-prefixes=CHECK,FORCED
// RUN: FileCheck %s --allow-empty --check-prefix=QUIET --input-file=%t.forced
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=2 form=grouped" | FileCheck %s
// RUN: falcon-opt %s --lcma-rewrite="scheme=classical" | FileCheck %s

// A contraction whose reduction K has extent 0 sums over no terms: its result
// is its init, exactly, whatever its body (casts included). IREE 3.13 crashes
// compiling such an op (SIGFPE), so lcma-rewrite replaces it by its init under
// every option (auto, forced schemes, grouped, classical), reports why, and
// raises no remark. A contraction with K > 0 beside it is served as before.

// CHECK-LABEL: func.func @mm
// CHECK-SAME: %[[C:[a-z0-9]+]]: tensor<8x16xf32>
// CHECK-NOT: linalg.matmul
// CHECK: return %[[C]] : tensor<8x16xf32>
func.func @mm(%a: tensor<8x0xf32>, %b: tensor<0x16xf32>, %c: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<8x0xf32>, tensor<0x16xf32>) outs(%c : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// The init a fill: the fill is returned.
// CHECK-LABEL: func.func @mm_fill
// CHECK: %[[F:.+]] = linalg.fill
// CHECK-NOT: linalg.matmul
// CHECK: return %[[F]] : tensor<8x16xf32>
func.func @mm_fill(%a: tensor<8x0xf32>, %b: tensor<0x16xf32>) -> tensor<8x16xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x16xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<8x16xf32>) -> tensor<8x16xf32>
  %0 = linalg.matmul ins(%a, %b : tensor<8x0xf32>, tensor<0x16xf32>) outs(%f : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// CHECK-LABEL: func.func @bmm
// CHECK-SAME: %[[C:[a-z0-9]+]]: tensor<2x8x16xf32>
// CHECK-NOT: linalg.batch_matmul
// CHECK: return %[[C]] : tensor<2x8x16xf32>
func.func @bmm(%a: tensor<2x8x0xf32>, %b: tensor<2x0x16xf32>, %c: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  %0 = linalg.batch_matmul ins(%a, %b : tensor<2x8x0xf32>, tensor<2x0x16xf32>) outs(%c : tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return %0 : tensor<2x8x16xf32>
}

// A generic contraction with casts in its body (f16 x f16 -> f32).
// CHECK-LABEL: func.func @gen
// CHECK-SAME: %[[C:[a-z0-9]+]]: tensor<6x9xf32>
// CHECK-NOT: linalg.generic
// CHECK: return %[[C]] : tensor<6x9xf32>
#mA = affine_map<(m, n, k) -> (m, k)>
#mB = affine_map<(m, n, k) -> (k, n)>
#mC = affine_map<(m, n, k) -> (m, n)>
func.func @gen(%a: tensor<6x0xf16>, %b: tensor<0x9xf16>, %c: tensor<6x9xf32>) -> tensor<6x9xf32> {
  %0 = linalg.generic {indexing_maps = [#mA, #mB, #mC], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : tensor<6x0xf16>, tensor<0x9xf16>) outs(%c : tensor<6x9xf32>) {
  ^bb0(%x: f16, %y: f16, %o: f32):
    %xe = arith.extf %x : f16 to f32
    %ye = arith.extf %y : f16 to f32
    %p = arith.mulf %xe, %ye : f32
    %s = arith.addf %o, %p : f32
    linalg.yield %s : f32
  } -> tensor<6x9xf32>
  return %0 : tensor<6x9xf32>
}

// A dynamic M (no run-time dispatch: nothing to dispatch).
// CHECK-LABEL: func.func @dyn
// CHECK-SAME: %[[C:[a-z0-9]+]]: tensor<?x16xf32>
// CHECK-NOT: linalg.matmul
// CHECK-NOT: scf.if
// CHECK: return %[[C]] : tensor<?x16xf32>
func.func @dyn(%a: tensor<?x0xf32>, %b: tensor<0x16xf32>, %c: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<?x0xf32>, tensor<0x16xf32>) outs(%c : tensor<?x16xf32>) -> tensor<?x16xf32>
  return %0 : tensor<?x16xf32>
}

// K > 0 beside them: served as the options say (forced strassen: 7 products).
// CHECK-LABEL: func.func @full
// FORCED-COUNT-7: linalg.matmul
// CHECK: return
func.func @full(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>, %c: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<64x64xf32>, tensor<64x64xf32>) outs(%c : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %0 : tensor<64x64xf32>
}

// REPORT: "location": "{{.*}}empty_reduction.mlir:20:8"
// REPORT-NEXT: "op": "linalg.matmul",
// REPORT-NEXT: "kind": "matmul",
// REPORT-NEXT: "M": 8,
// REPORT-NEXT: "N": 16,
// REPORT-NEXT: "K": 0,
// REPORT: "plan": "classical",
// REPORT-NEXT: "reason": "an empty reduction (K = 0): replaced by its init {{.*}}",
// REPORT-NEXT: "predicted_error": null,
// REPORT-NEXT: "predicted_time": null,
// REPORT-NEXT: "remark": false,
// REPORT-NEXT: "replaced_by": "init"
// REPORT: "op": "linalg.batch_matmul",
// REPORT: "batch": [
// REPORT-NEXT: 2
// REPORT: "replaced_by": "init"
// REPORT: "op": "linalg.generic",
// REPORT: "lhs": "f16",
// REPORT: "replaced_by": "init"
// REPORT: "M": null,
// REPORT: "replaced_by": "init"

// EXPLAIN: empty_reduction.mlir:20:8: linalg.matmul M=8 N=16 K=0 (f32 x f32 -> f32): replaced by its init
// EXPLAIN-NEXT: why: an empty reduction (K = 0): replaced by its init
// EXPLAIN: linalg.batch_matmul M=8 N=16 K=0 batch=[2] (f32 x f32 -> f32): replaced by its init
// EXPLAIN: linalg.generic M=6 N=9 K=0 (f16 x f16 -> f32): replaced by its init
// EXPLAIN: linalg.matmul M=? N=16 K=0 (f32 x f32 -> f32): replaced by its init
// EXPLAIN: lcma-explain: {{[01]}} of 6 contractions rewritten, 5 replaced by their init (K = 0)

// QUIET-NOT: remark
