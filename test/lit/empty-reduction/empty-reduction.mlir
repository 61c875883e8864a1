// RUN: falcon-opt %s --empty-reduction --lcma-report=%t.json --lcma-explain 2> %t.explain | FileCheck %s
// RUN: FileCheck %s --check-prefix=REPORT --input-file=%t.json
// RUN: FileCheck %s --check-prefix=EXPLAIN --input-file=%t.explain
// RUN: falcon-opt %s --pass-pipeline="builtin.module(empty-reduction,canonicalize)" | FileCheck %s --check-prefix=CANON

// The empty-reduction pass alone: every contraction whose reduction has the
// static extent 0 becomes its init (the outs operand), including ones
// lcma-rewrite cannot serve (unsigned casts, two K loops, an empty M too);
// contractions with K > 0, and memref ones, are left alone and not reported.

// CHECK-LABEL: func.func @mm
// CHECK-SAME: %[[C:[a-z0-9]+]]: tensor<8x16xf32>
// CHECK-NEXT: return %[[C]] : tensor<8x16xf32>
func.func @mm(%a: tensor<8x0xf32>, %b: tensor<0x16xf32>, %c: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<8x0xf32>, tensor<0x16xf32>) outs(%c : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// An i8 x i8 -> i32 generic with unsigned casts (lcma-rewrite cannot serve its
// body; the body never runs here).
// CHECK-LABEL: func.func @unsigned
// CHECK-SAME: %[[C:[a-z0-9]+]]: tensor<4x5xi32>
// CHECK-NEXT: return %[[C]] : tensor<4x5xi32>
func.func @unsigned(%a: tensor<4x0xi8>, %b: tensor<0x5xi8>, %c: tensor<4x5xi32>) -> tensor<4x5xi32> {
  %0 = linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : tensor<4x0xi8>, tensor<0x5xi8>) outs(%c : tensor<4x5xi32>) {
  ^bb0(%x: i8, %y: i8, %o: i32):
    %xe = arith.extui %x : i8 to i32
    %ye = arith.extui %y : i8 to i32
    %p = arith.muli %xe, %ye : i32
    %s = arith.addi %o, %p : i32
    linalg.yield %s : i32
  } -> tensor<4x5xi32>
  return %0 : tensor<4x5xi32>
}

// Two reduction loops, one of extent 0 (C stored transposed: N x M).
// CHECK-LABEL: func.func @two_k
// CHECK-SAME: %[[C:[a-z0-9]+]]: tensor<5x4xf32>
// CHECK-NEXT: return %[[C]] : tensor<5x4xf32>
func.func @two_k(%a: tensor<4x3x0xf32>, %b: tensor<3x0x5xf32>, %c: tensor<5x4xf32>) -> tensor<5x4xf32> {
  %0 = linalg.generic {indexing_maps = [affine_map<(m, n, k1, k2) -> (m, k1, k2)>, affine_map<(m, n, k1, k2) -> (k1, k2, n)>, affine_map<(m, n, k1, k2) -> (n, m)>], iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
      ins(%a, %b : tensor<4x3x0xf32>, tensor<3x0x5xf32>) outs(%c : tensor<5x4xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %o, %p : f32
    linalg.yield %s : f32
  } -> tensor<5x4xf32>
  return %0 : tensor<5x4xf32>
}

// An empty M and an empty K: replaced as well (exact either way).
// CHECK-LABEL: func.func @empty_mk
// CHECK-SAME: %[[C:[a-z0-9]+]]: tensor<0x16xf32>) -> tensor<0x16xf32>
// CHECK-NEXT: return %[[C]] : tensor<0x16xf32>
func.func @empty_mk(%a: tensor<0x0xf32>, %b: tensor<0x16xf32>, %c: tensor<0x16xf32>) -> tensor<0x16xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<0x0xf32>, tensor<0x16xf32>) outs(%c : tensor<0x16xf32>) -> tensor<0x16xf32>
  return %0 : tensor<0x16xf32>
}

// Inside a loop, the result used twice.
// CHECK-LABEL: func.func @in_loop
// CHECK: scf.for {{.*}} iter_args(%[[ACC:[a-z0-9]+]] =
// CHECK-NOT: linalg.matmul
// CHECK: arith.addf %[[ACC]], %[[ACC]] : tensor<8x16xf32>
func.func @in_loop(%a: tensor<8x0xf32>, %b: tensor<0x16xf32>, %c: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %lb = arith.constant 0 : index
  %ub = arith.constant 3 : index
  %st = arith.constant 1 : index
  %r = scf.for %i = %lb to %ub step %st iter_args(%acc = %c) -> (tensor<8x16xf32>) {
    %0 = linalg.matmul ins(%a, %b : tensor<8x0xf32>, tensor<0x16xf32>) outs(%acc : tensor<8x16xf32>) -> tensor<8x16xf32>
    %1 = arith.addf %0, %0 : tensor<8x16xf32>
    scf.yield %1 : tensor<8x16xf32>
  }
  return %r : tensor<8x16xf32>
}

// K > 0 and memref contractions stay.
// CHECK-LABEL: func.func @full
// CHECK: linalg.matmul
// CHECK-LABEL: func.func @on_memref
// CHECK: linalg.matmul
func.func @full(%a: tensor<8x4xf32>, %b: tensor<4x16xf32>, %c: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<8x4xf32>, tensor<4x16xf32>) outs(%c : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}
func.func @on_memref(%a: memref<8x0xf32>, %b: memref<0x16xf32>, %c: memref<8x16xf32>) {
  linalg.matmul ins(%a, %b : memref<8x0xf32>, memref<0x16xf32>) outs(%c : memref<8x16xf32>)
  return
}

// REPORT: "op": "linalg.matmul",
// REPORT: "K": 0,
// REPORT: "reason": "an empty reduction (K = 0): replaced by its init {{.*}}",
// REPORT: "replaced_by": "init"
// REPORT: "op": "linalg.generic",
// REPORT: "lhs": "i8",
// REPORT: "acc": "i32"
// REPORT: "replaced_by": "init"
// REPORT: "kind": "generic",
// REPORT: "replaced_by": "init",
// REPORT-NEXT: "dims": {
// REPORT-NEXT: "K": [
// REPORT-NEXT: 3,
// REPORT-NEXT: 0
// REPORT: "M": 0,
// REPORT: "replaced_by": "init"
// REPORT: "replaced_by": "init"
// REPORT-NOT: "location"

// EXPLAIN: empty-reduction.mlir:15:8: linalg.matmul M=8 N=16 K=0 (f32 x f32 -> f32): replaced by its init
// EXPLAIN: lcma-explain: 0 of 5 contractions rewritten, 5 replaced by their init (K = 0)

// CANON-LABEL: func.func @in_loop
// CANON-NOT: linalg.matmul
// CANON: return
