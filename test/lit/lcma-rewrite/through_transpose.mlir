// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen" --canonicalize | FileCheck %s

// An operand made by a 2-D transpose (IREE's import of dX = dY W^T and of
// dW = X^T dY) is read in place: the blocks are cut from the transpose's
// source, the products take the transposed map, the transpose goes away.

// CHECK-DAG: #[[MA:.+]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG: #[[MB:.+]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-DAG: #[[MAT:.+]] = affine_map<(d0, d1, d2) -> (d2, d0)>
// CHECK-DAG: #[[MBD:.+]] = affine_map<(d0, d1, d2) -> (d2, d1)>

// CHECK-LABEL: func.func @dx
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<10x6xf32>
// CHECK-NOT: linalg.transpose
// CHECK-DAG: tensor.extract_slice %[[W]][5, 3] [5, 3] [1, 1] : tensor<10x6xf32> to tensor<5x3xf32>
// CHECK-COUNT-7: linalg.matmul indexing_maps = [#[[MA]], #[[MB]], #{{.+}}] ins(%{{.+}}, %{{.+}} : tensor<4x3xf32>, tensor<5x3xf32>)
// CHECK-NOT: linalg.matmul
func.func @dx(%dy: tensor<8x6xf32>, %w: tensor<10x6xf32>, %c: tensor<8x10xf32>) -> tensor<8x10xf32> {
  %e = tensor.empty() : tensor<6x10xf32>
  %wt = linalg.transpose ins(%w : tensor<10x6xf32>) outs(%e : tensor<6x10xf32>) permutation = [1, 0]
  %0 = linalg.matmul ins(%dy, %wt : tensor<8x6xf32>, tensor<6x10xf32>) outs(%c : tensor<8x10xf32>) -> tensor<8x10xf32>
  return %0 : tensor<8x10xf32>
}

// The transpose as IREE's import writes it (a copying linalg.generic), on A.
// CHECK-LABEL: func.func @dw
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<6x8xf32>
// CHECK-NOT: linalg.generic {{.*}}ins(%[[X]] : tensor<6x8xf32>)
// CHECK-DAG: tensor.extract_slice %[[X]][3, 4] [3, 4] [1, 1] : tensor<6x8xf32> to tensor<3x4xf32>
// CHECK-COUNT-7: linalg.matmul indexing_maps = [#[[MAT]], #[[MBD]], #{{.+}}] ins(%{{.+}}, %{{.+}} : tensor<3x4xf32>, tensor<3x5xf32>)
// CHECK-NOT: linalg.matmul
func.func @dw(%x: tensor<6x8xf32>, %dy: tensor<6x10xf32>, %c: tensor<8x10xf32>) -> tensor<8x10xf32> {
  %e = tensor.empty() : tensor<8x6xf32>
  %xt = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>],
                        iterator_types = ["parallel", "parallel"]} ins(%x : tensor<6x8xf32>) outs(%e : tensor<8x6xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<8x6xf32>
  %0 = linalg.matmul ins(%xt, %dy : tensor<8x6xf32>, tensor<6x10xf32>) outs(%c : tensor<8x10xf32>) -> tensor<8x10xf32>
  return %0 : tensor<8x10xf32>
}

// A transpose with another user stays for that user; the matmul still reads its source.
// CHECK-LABEL: func.func @shared
// CHECK-SAME: %[[W2:[a-z0-9]+]]: tensor<10x6xf32>
// CHECK: %[[T:.+]] = linalg.transpose ins(%[[W2]]
// CHECK-DAG: tensor.extract_slice %[[W2]][5, 3] [5, 3] [1, 1]
// CHECK-COUNT-7: linalg.matmul indexing_maps = [#[[MA]], #[[MB]], #{{.+}}]
// CHECK: return %{{.+}}, %[[T]]
func.func @shared(%dy: tensor<8x6xf32>, %w: tensor<10x6xf32>, %c: tensor<8x10xf32>) -> (tensor<8x10xf32>, tensor<6x10xf32>) {
  %e = tensor.empty() : tensor<6x10xf32>
  %wt = linalg.transpose ins(%w : tensor<10x6xf32>) outs(%e : tensor<6x10xf32>) permutation = [1, 0]
  %0 = linalg.matmul ins(%dy, %wt : tensor<8x6xf32>, tensor<6x10xf32>) outs(%c : tensor<8x10xf32>) -> tensor<8x10xf32>
  return %0, %wt : tensor<8x10xf32>, tensor<6x10xf32>
}
