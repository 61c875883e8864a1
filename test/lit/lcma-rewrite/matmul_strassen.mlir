// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=1" | FileCheck %s

// One level of Strassen on a divisible f32 matmul: 2x2 blocks of A and B,
// 7 products of combined blocks, 4 combine-C generics reading the live
// accumulator, results inserted into C.

// CHECK-LABEL: func.func @mm
// CHECK-SAME: (%[[A:.+]]: tensor<8x6xf32>, %[[B:.+]]: tensor<6x4xf32>, %[[C:.+]]: tensor<8x4xf32>)
// CHECK-DAG: tensor.extract_slice %[[A]][0, 0] [4, 3] [1, 1] : tensor<8x6xf32> to tensor<4x3xf32>
// CHECK-DAG: tensor.extract_slice %[[A]][4, 3] [4, 3] [1, 1] : tensor<8x6xf32> to tensor<4x3xf32>
// CHECK-DAG: tensor.extract_slice %[[B]][3, 2] [3, 2] [1, 1] : tensor<6x4xf32> to tensor<3x2xf32>
// CHECK-COUNT-7: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<4x3xf32>, tensor<3x2xf32>) outs(%{{.+}} : tensor<4x2xf32>)
// CHECK-NOT: linalg.matmul
// CHECK: tensor.extract_slice %[[C]][0, 0] [4, 2] [1, 1]
// CHECK: linalg.generic
// CHECK: ^bb0(%{{.+}}: f32, %{{.+}}: f32, %[[OUT:.+]]: f32):
// CHECK: arith.addf %[[OUT]]
// CHECK: tensor.insert_slice %{{.+}} into %{{.+}}[0, 0] [4, 2] [1, 1] : tensor<4x2xf32> into tensor<8x4xf32>
// CHECK-DAG: tensor.insert_slice %{{.+}} into %{{.+}}[0, 2] [4, 2] [1, 1]
// CHECK-DAG: tensor.insert_slice %{{.+}} into %{{.+}}[4, 0] [4, 2] [1, 1]
// CHECK-DAG: tensor.insert_slice %{{.+}} into %{{.+}}[4, 2] [4, 2] [1, 1]
// CHECK: return
func.func @mm(%a: tensor<8x6xf32>, %b: tensor<6x4xf32>, %c: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<8x6xf32>, tensor<6x4xf32>) outs(%c : tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
