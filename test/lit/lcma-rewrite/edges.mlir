// RUN: falcon-opt %s --split-input-file --lcma-rewrite="scheme=strassen edge=peel" | FileCheck %s --check-prefix=PEEL
// RUN: falcon-opt %s --split-input-file --lcma-rewrite="scheme=strassen edge=pad" | FileCheck %s --check-prefix=PAD

// 5 x 7 x 3: the scheme takes the 4 x 6 x 2 core. Peeling adds three
// classical products (the K remainder into the core's accumulator, the last
// row of C, the last column of C); padding zero-pads to 6 x 8 x 4 and slices
// the result back.

// PEEL-LABEL: func.func @odd
// PEEL: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<4x1xf32>, tensor<1x2xf32>) outs(%{{.+}} : tensor<4x2xf32>)
// PEEL-COUNT-7: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<2x3xf32>, tensor<3x1xf32>)
// PEEL: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<1x7xf32>, tensor<7x3xf32>) outs(%{{.+}} : tensor<1x3xf32>)
// PEEL: tensor.insert_slice %{{.+}} into %{{.+}}[4, 0] [1, 3] [1, 1]
// PEEL: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<4x7xf32>, tensor<7x1xf32>) outs(%{{.+}} : tensor<4x1xf32>)
// PEEL: tensor.insert_slice %{{.+}} into %{{.+}}[0, 2] [4, 1] [1, 1]
// PEEL-NOT: linalg.matmul

// PAD-LABEL: func.func @odd
// PAD: linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<6x8xf32>)
// PAD: tensor.insert_slice %{{.+}} into %{{.+}}[0, 0] [5, 7] [1, 1] : tensor<5x7xf32> into tensor<6x8xf32>
// PAD-COUNT-7: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<3x4xf32>, tensor<4x2xf32>)
// PAD-NOT: linalg.matmul
// PAD: tensor.extract_slice %{{.+}}[0, 0] [5, 3] [1, 1] : tensor<6x4xf32> to tensor<5x3xf32>
func.func @odd(%a: tensor<5x7xf32>, %b: tensor<7x3xf32>, %c: tensor<5x3xf32>) -> tensor<5x3xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<5x7xf32>, tensor<7x3xf32>) outs(%c : tensor<5x3xf32>) -> tensor<5x3xf32>
  return %0 : tensor<5x3xf32>
}

// -----

// Smaller than the scheme's blocks: stays classical with a remark.
// PEEL-LABEL: func.func @tiny
// PEEL: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<1x4xf32>, tensor<4x4xf32>)
func.func @tiny(%a: tensor<1x4xf32>, %b: tensor<4x4xf32>, %c: tensor<1x4xf32>) -> tensor<1x4xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<1x4xf32>, tensor<4x4xf32>) outs(%c : tensor<1x4xf32>) -> tensor<1x4xf32>
  return %0 : tensor<1x4xf32>
}
