// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=2" | FileCheck %s --check-prefix=TWO
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen,2x2x3:11 levels=2" | FileCheck %s --check-prefix=MIXED
// RUN: falcon-opt %s --lcma-rewrite="scheme=4x4x4:49" | FileCheck %s --check-prefix=KRON

// Two levels of Strassen: 49 products of 2x2 blocks; a different scheme at
// level 2 (7 x 11 = 77 products); and the 4x4x4:49 scheme applied once.

// TWO-COUNT-49: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<2x3xf32>, tensor<3x3xf32>)
// TWO-NOT: linalg.matmul
// MIXED-COUNT-77: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<2x3xf32>, tensor<3x2xf32>)
// MIXED-NOT: linalg.matmul
// KRON-COUNT-49: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<2x3xf32>, tensor<3x3xf32>)
// KRON-NOT: linalg.matmul
func.func @l2(%a: tensor<8x12xf32>, %b: tensor<12x12xf32>, %c: tensor<8x12xf32>) -> tensor<8x12xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<8x12xf32>, tensor<12x12xf32>) outs(%c : tensor<8x12xf32>) -> tensor<8x12xf32>
  return %0 : tensor<8x12xf32>
}
