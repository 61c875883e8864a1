// RUN: falcon-opt %s --split-input-file --lcma-rewrite="scheme=strassen barriers=true chunk=64" --canonicalize --cse | FileCheck %s

// barriers=true (the default inside falcon-compile and the API): every
// contraction the rewrite emits reads no bare slice. IREE's data tiling
// otherwise packs the slice inside the contraction's dispatch and llvm-cpu
// runs out of stack ("exceeded stack allocation limit of 32768 bytes"),
// for the accumulator as for A and B.

// Peeled strips of an accumulating 127^3 matmul: the K strip (126 x 1 x 126)
// reads a slice of the live C as its init, the row and column strips slices
// of A, B and C; each goes behind IREE's compute barrier
// (iree_tensor_ext.compute_barrier.start, which dispatch creation removes).
// CHECK-LABEL: func.func @peel
// CHECK-SAME: %[[A:[a-z0-9]+]]: tensor<127x127xf32>, %[[B:[a-z0-9]+]]: tensor<127x127xf32>, %[[C:[a-z0-9]+]]: tensor<127x127xf32>
// CHECK-DAG: %[[CI:.+]] = tensor.extract_slice %[[C]][0, 0] [126, 126] [1, 1]
// CHECK-DAG: %[[AK:.+]] = tensor.extract_slice %[[A]][0, 126] [126, 1] [1, 1]
// CHECK-DAG: %[[BK:.+]] = tensor.extract_slice %[[B]][126, 0] [1, 126] [1, 1]
// CHECK-DAG: %[[AKB:.+]] = iree_tensor_ext.compute_barrier.start %[[AK]] : tensor<126x1xf32> -> tensor<126x1xf32>
// CHECK-DAG: %[[BKB:.+]] = iree_tensor_ext.compute_barrier.start %[[BK]] : tensor<1x126xf32> -> tensor<1x126xf32>
// CHECK-DAG: %[[CIB:.+]] = iree_tensor_ext.compute_barrier.start %[[CI]] : tensor<126x126xf32> -> tensor<126x126xf32>
// CHECK: linalg.matmul ins(%[[AKB]], %[[BKB]] : tensor<126x1xf32>, tensor<1x126xf32>) outs(%[[CIB]] : tensor<126x126xf32>)
// CHECK-DAG: %[[AR:.+]] = tensor.extract_slice %[[A]][126, 0] [1, 127] [1, 1]
// CHECK-DAG: %[[CR:.+]] = tensor.extract_slice %[[C]][126, 0] [1, 127] [1, 1]
// CHECK-DAG: %[[ARB:.+]] = iree_tensor_ext.compute_barrier.start %[[AR]] : tensor<1x127xf32> -> tensor<1x127xf32>
// CHECK-DAG: %[[CRB:.+]] = iree_tensor_ext.compute_barrier.start %[[CR]] : tensor<1x127xf32> -> tensor<1x127xf32>
// CHECK: linalg.matmul ins(%[[ARB]], %[[B]] : tensor<1x127xf32>, tensor<127x127xf32>) outs(%[[CRB]] : tensor<1x127xf32>)
// CHECK-DAG: %[[CC:.+]] = tensor.extract_slice %[[C]][0, 126] [126, 1] [1, 1]
// CHECK-DAG: %[[CCB:.+]] = iree_tensor_ext.compute_barrier.start %[[CC]] : tensor<126x1xf32> -> tensor<126x1xf32>
// CHECK: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<126x127xf32>, tensor<127x1xf32>) outs(%[[CCB]] : tensor<126x1xf32>)
func.func @peel(%a: tensor<127x127xf32>, %b: tensor<127x127xf32>, %c: tensor<127x127xf32>) -> tensor<127x127xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<127x127xf32>, tensor<127x127xf32>) outs(%c : tensor<127x127xf32>) -> tensor<127x127xf32>
  return %0 : tensor<127x127xf32>
}

// -----

// The run-time dispatch's remainder (M mod 64 rows, classical) reads dynamic
// slices of A and of the accumulated C: behind barriers too, the barrier
// carrying their dynamic size.
// CHECK-LABEL: func.func @dyn_bmm
// CHECK: scf.for
// CHECK: %[[REST:.+]] = arith.subi
// CHECK-NEXT: %[[AT:.+]] = tensor.extract_slice %{{.+}}[0, %{{.+}}, 0] [4, %[[REST]], 96] [1, 1, 1]
// CHECK-NEXT: %[[CT:.+]] = tensor.extract_slice %{{.+}}[0, %{{.+}}, 0] [4, %[[REST]], 96] [1, 1, 1]
// CHECK-NEXT: %[[ATT:.+]] = iree_tensor_ext.compute_barrier.start %[[AT]] : tensor<4x?x96xf32>{%[[REST]]} -> tensor<4x?x96xf32>
// CHECK-NEXT: %[[CTT:.+]] = iree_tensor_ext.compute_barrier.start %[[CT]] : tensor<4x?x96xf32>{%[[REST]]} -> tensor<4x?x96xf32>
// CHECK-NEXT: linalg.batch_matmul ins(%[[ATT]], %{{.+}} : tensor<4x?x96xf32>, tensor<4x96x96xf32>) outs(%[[CTT]] : tensor<4x?x96xf32>)
func.func @dyn_bmm(%a: tensor<4x?x96xf32>, %b: tensor<4x96x96xf32>, %c: tensor<4x?x96xf32>) -> tensor<4x?x96xf32> {
  %0 = linalg.batch_matmul ins(%a, %b : tensor<4x?x96xf32>, tensor<4x96x96xf32>) outs(%c : tensor<4x?x96xf32>) -> tensor<4x?x96xf32>
  return %0 : tensor<4x?x96xf32>
}

// -----

// A 1 x 1 block of A (2 x 2 A under Strassen): every product's LHS, a combine
// A included, goes behind a barrier. IREE 3.13's data tiling fails on a matmul
// whose 1 x 1 LHS an elementwise op makes ("tiling factors must be less than
// or equal to the input rank for pack"; found by scripts/fuzz_diff.py).
// CHECK-LABEL: func.func @unit_lhs
// CHECK: %[[S:.+]] = linalg.generic {{.*}} outs(%{{.+}} : tensor<1x1xf32>)
// CHECK: %[[SB:.+]] = iree_tensor_ext.compute_barrier.start %[[S]] : tensor<1x1xf32> -> tensor<1x1xf32>
// CHECK: linalg.matmul ins(%[[SB]], %{{.+}} : tensor<1x1xf32>, tensor<1x2xf32>)
// CHECK: return
func.func @unit_lhs(%a: tensor<2x2xf32>, %b: tensor<2x4xf32>, %c: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<2x2xf32>, tensor<2x4xf32>) outs(%c : tensor<2x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}
