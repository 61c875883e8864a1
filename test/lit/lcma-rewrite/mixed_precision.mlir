// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen" | FileCheck %s

// bf16 operands, f32 accumulator: combined operands are formed in f32
// (arith.extf inside the combine), blocks used alone stay bf16.

// CHECK-LABEL: func.func @mixed
// CHECK: linalg.generic
// CHECK: ^bb0(%[[X:.+]]: bf16, %[[Y:.+]]: bf16, %{{.+}}: f32):
// CHECK: arith.extf %[[X]] : bf16 to f32
// CHECK: arith.extf %[[Y]] : bf16 to f32
// CHECK: arith.addf
// CHECK: -> tensor<4x4xf32>
// CHECK: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<4x4xf32>, tensor<4x4xf32>) outs(%{{.+}} : tensor<4x4xf32>)
// CHECK: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<4x4xf32>, tensor<4x4xbf16>)
func.func @mixed(%a: tensor<8x8xbf16>, %b: tensor<8x8xbf16>, %c: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<8x8xbf16>, tensor<8x8xbf16>) outs(%c : tensor<8x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
