// RUN: falcon-opt %s --empty-reduction --lcma-report=%t.json | FileCheck %s
// RUN: FileCheck %s --check-prefix=REPORT --input-file=%t.json
// RUN: falcon-opt %s --lcma-rewrite | FileCheck %s
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen" | FileCheck %s

// A K of static size 0 that the op's own types do not show in every operand.
// Were (break-it): left to IREE, whose canonicalization makes the 0 static and
// then dies of SIGFPE (falcon-compile exit status 136 without a word, with the
// rewrite auto, forced or off; compile_str killed the Python process).

// K is 0 in B, dynamic in A: 0 in any valid run.
// CHECK-LABEL: func.func @mixed
// CHECK-SAME: %[[C:[a-z0-9]+]]: tensor<8x16xf32>
// CHECK-NEXT: return %[[C]] : tensor<8x16xf32>
func.func @mixed(%a: tensor<8x?xf32>, %b: tensor<0x16xf32>, %c: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<8x?xf32>, tensor<0x16xf32>) outs(%c : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// Everything dynamic but K in B (the report's M and N are null).
// CHECK-LABEL: func.func @mixed_dynamic
// CHECK-SAME: tensor<0x?xf32>, %[[C:[a-z0-9]+]]: tensor<?x?xf32>
// CHECK-NEXT: return %[[C]] : tensor<?x?xf32>
func.func @mixed_dynamic(%a: tensor<?x?xf32>, %b: tensor<0x?xf32>, %c: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<0x?xf32>) outs(%c : tensor<?x?xf32>) -> tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}

// K dynamic in both operands, each a tensor.cast (two in a row for B) of a
// static 0: IREE folds the casts into the op.
// CHECK-LABEL: func.func @through_casts
// CHECK-SAME: %[[C:[a-z0-9]+]]: tensor<8x16xf32>
// CHECK-NOT: linalg.matmul
// CHECK: return %[[C]] : tensor<8x16xf32>
func.func @through_casts(%a0: tensor<8x0xf32>, %b0: tensor<0x16xf32>, %c: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %a = tensor.cast %a0 : tensor<8x0xf32> to tensor<8x?xf32>
  %b1 = tensor.cast %b0 : tensor<0x16xf32> to tensor<0x?xf32>
  %b = tensor.cast %b1 : tensor<0x?xf32> to tensor<?x?xf32>
  %0 = linalg.matmul ins(%a, %b : tensor<8x?xf32>, tensor<?x?xf32>) outs(%c : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// A dynamic K that is only a cast of a dynamic size, and a static N of 0 seen
// through a cast (an empty result, which IREE compiles): both stay.
// CHECK-LABEL: func.func @dynamic_k_stays
// CHECK: linalg.matmul
// CHECK-LABEL: func.func @empty_n_stays
// CHECK: linalg.matmul
func.func @dynamic_k_stays(%a: tensor<8x?xf32>, %b0: tensor<?x16xf32>, %c: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %b = tensor.cast %b0 : tensor<?x16xf32> to tensor<?x?xf32>
  %0 = linalg.matmul ins(%a, %b : tensor<8x?xf32>, tensor<?x?xf32>) outs(%c : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}
func.func @empty_n_stays(%a: tensor<8x4xf32>, %b0: tensor<4x0xf32>, %c: tensor<8x?xf32>) -> tensor<8x?xf32> {
  %b = tensor.cast %b0 : tensor<4x0xf32> to tensor<4x?xf32>
  %0 = linalg.matmul ins(%a, %b : tensor<8x4xf32>, tensor<4x?xf32>) outs(%c : tensor<8x?xf32>) -> tensor<8x?xf32>
  return %0 : tensor<8x?xf32>
}

// REPORT: "location": "{{.*}}hidden-zero.mlir:16:8",
// REPORT: "M": 8,
// REPORT: "K": 0,
// REPORT: "replaced_by": "init"
// REPORT: "location": "{{.*}}hidden-zero.mlir:25:8",
// REPORT: "M": null,
// REPORT-NEXT: "N": null,
// REPORT-NEXT: "K": 0,
// REPORT: "replaced_by": "init"
// REPORT: "location": "{{.*}}hidden-zero.mlir:39:8",
// REPORT: "replaced_by": "init"

// A K that slices or empty tensors fix at 0 by a constant size (IREE's
// canonicalization makes it static too).
// CHECK-LABEL: func.func @sliced
// CHECK-SAME: %[[C:[a-z0-9]+]]: tensor<8x16xf32>
// CHECK-NOT: linalg.matmul
// CHECK: return %[[C]] : tensor<8x16xf32>
func.func @sliced(%a: tensor<8x4xf32>, %b: tensor<4x16xf32>, %c: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %z = arith.constant 0 : index
  %sa = tensor.extract_slice %a[0, 0] [8, %z] [1, 1] : tensor<8x4xf32> to tensor<8x?xf32>
  %sb = tensor.extract_slice %b[0, 0] [%z, 16] [1, 1] : tensor<4x16xf32> to tensor<?x16xf32>
  %0 = linalg.matmul ins(%sa, %sb : tensor<8x?xf32>, tensor<?x16xf32>) outs(%c : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}
// CHECK-LABEL: func.func @emptied
// CHECK-NOT: linalg.matmul
// CHECK: return
func.func @emptied(%n: index, %c: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %z = arith.constant 0 : index
  %a = tensor.empty(%n, %z) : tensor<?x?xf32>
  %b = tensor.empty(%z) : tensor<?x16xf32>
  %0 = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<?x16xf32>) outs(%c : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// A constant size other than 0, and a rank-reducing slice (its sizes do not
// line up with the result's dimensions; K is an argument): both stay.
// CHECK-LABEL: func.func @sliced_one
// CHECK: linalg.matmul
// CHECK-LABEL: func.func @rank_reducing
// CHECK: linalg.matmul
func.func @sliced_one(%a: tensor<8x4xf32>, %b: tensor<4x16xf32>, %c: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %one = arith.constant 1 : index
  %sa = tensor.extract_slice %a[0, 0] [8, %one] [1, 1] : tensor<8x4xf32> to tensor<8x?xf32>
  %sb = tensor.extract_slice %b[0, 0] [%one, 16] [1, 1] : tensor<4x16xf32> to tensor<?x16xf32>
  %0 = linalg.matmul ins(%sa, %sb : tensor<8x?xf32>, tensor<?x16xf32>) outs(%c : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}
func.func @rank_reducing(%a3: tensor<1x8x4xf32>, %k: index, %b: tensor<?x16xf32>, %c: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %a = tensor.extract_slice %a3[0, 0, 0] [1, 8, %k] [1, 1, 1] : tensor<1x8x4xf32> to tensor<8x?xf32>
  %0 = linalg.matmul ins(%a, %b : tensor<8x?xf32>, tensor<?x16xf32>) outs(%c : tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// REPORT: "op": "linalg.matmul",
// REPORT: "replaced_by": "init"
// REPORT: "op": "linalg.matmul",
// REPORT: "replaced_by": "init"
// REPORT-NOT: "location"
