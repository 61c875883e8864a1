// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen" | FileCheck %s

// The batch dimension stays: blocks are cut along M, K, N only.

// CHECK-LABEL: func.func @bmm
// CHECK-SAME: %[[A:[a-z0-9]+]]: tensor<3x8x6xf32>
// CHECK-DAG: tensor.extract_slice %[[A]][0, 4, 3] [3, 4, 3] [1, 1, 1] : tensor<3x8x6xf32> to tensor<3x4x3xf32>
// CHECK-COUNT-7: linalg.batch_matmul {{.*}}ins(%{{.+}}, %{{.+}} : tensor<3x4x3xf32>, tensor<3x3x2xf32>) outs(%{{.+}} : tensor<3x4x2xf32>)
// CHECK-NOT: linalg.batch_matmul
// CHECK: tensor.insert_slice %{{.+}} into %{{.+}}[0, 4, 2] [3, 4, 2] [1, 1, 1] : tensor<3x4x2xf32> into tensor<3x8x4xf32>
func.func @bmm(%a: tensor<3x8x6xf32>, %b: tensor<3x6x4xf32>, %c: tensor<3x8x4xf32>) -> tensor<3x8x4xf32> {
  %0 = linalg.batch_matmul ins(%a, %b : tensor<3x8x6xf32>, tensor<3x6x4xf32>) outs(%c : tensor<3x8x4xf32>) -> tensor<3x8x4xf32>
  return %0 : tensor<3x8x4xf32>
}
