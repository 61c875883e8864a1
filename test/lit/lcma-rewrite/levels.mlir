// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=2" | FileCheck %s --check-prefix=TWO
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen,2x2x3:11 levels=2" | FileCheck %s --check-prefix=MIXED
// RUN: falcon-opt %s --lcma-rewrite="scheme=4x4x4:49" | FileCheck %s --check-prefix=KRON

// Two levels of Strassen (49 products of 2x3 by 3x3 blocks) and a different
// scheme at level 2 (7 x 11 = 77 products) are emitted stacked: per level one
// combine op per operand forms all R combined operands of every operand of
// the level above (7 x 4 x 6, then 7 x 7 x 2 x 3 collapsed to 49), one
// batch_matmul computes every product, and combine C runs level by level,
// one op per level (level 2 writes the 7 stacked operands of level 1, level 1
// writes C). The
// 4x4x4:49 scheme applied once keeps one matmul per product.

// TWO: tensor.empty() : tensor<7x4x6xf32>
// TWO: tensor.empty() : tensor<7x6x6xf32>
// TWO: tensor.empty() : tensor<7x7x2x3xf32>
// TWO: tensor.collapse_shape %{{.+}} {{\[}}[0, 1], [2], [3]] : tensor<7x7x2x3xf32> into tensor<49x2x3xf32>
// TWO: tensor.collapse_shape %{{.+}} : tensor<7x7x3x3xf32> into tensor<49x3x3xf32>
// TWO: linalg.batch_matmul ins(%{{.+}}, %{{.+}} : tensor<49x2x3xf32>, tensor<49x3x3xf32>) outs(%{{.+}} : tensor<49x2x3xf32>)
// TWO-NOT: linalg.batch_matmul
// TWO-NOT: linalg.matmul
// Level 2's combine C is one op over all 2 x 2 output blocks of the 7
// stacked level-1 operands: it reads the seven slices [r * 7, r * 7 + 7) of
// the products with a 2 x 2 coefficient table each and writes the blocks in
// place through expand_shape:
// TWO: tensor.expand_shape %{{.+}} {{\[}}[0], [1, 2], [3, 4]] output_shape [7, 2, 2, 2, 3] : tensor<7x4x6xf32> into tensor<7x2x2x2x3xf32>
// TWO: tensor.extract_slice %[[P:.+]][0, 0, 0] [7, 2, 3] [1, 1, 1] : tensor<49x2x3xf32> to tensor<7x2x3xf32>
// TWO: tensor.extract_slice %[[P]][42, 0, 0] [7, 2, 3] [1, 1, 1] : tensor<49x2x3xf32> to tensor<7x2x3xf32>
// TWO: } -> tensor<7x2x2x2x3xf32>
// TWO: %[[L1:.+]] = tensor.collapse_shape %{{.+}} : tensor<7x2x2x2x3xf32> into tensor<7x4x6xf32>
// Level 1's combine C reads the level-1 products as rank-reduced slices and
// accumulates into C viewed as 2 x 2 blocks:
// TWO: tensor.expand_shape %arg2 {{\[}}[0, 1], [2, 3]] output_shape [2, 4, 2, 6] : tensor<8x12xf32> into tensor<2x4x2x6xf32>
// TWO: tensor.extract_slice %[[L1]][0, 0, 0] [1, 4, 6] [1, 1, 1] : tensor<7x4x6xf32> to tensor<4x6xf32>
// TWO: tensor.extract_slice %[[L1]][6, 0, 0] [1, 4, 6] [1, 1, 1] : tensor<7x4x6xf32> to tensor<4x6xf32>
// TWO: } -> tensor<2x4x2x6xf32>
// TWO: tensor.collapse_shape %{{.+}} {{\[}}[0, 1], [2, 3]] : tensor<2x4x2x6xf32> into tensor<8x12xf32>

// MIXED: tensor.empty() : tensor<11x7x2x3xf32>
// MIXED: tensor.collapse_shape %{{.+}} : tensor<11x7x2x3xf32> into tensor<77x2x3xf32>
// MIXED: tensor.collapse_shape %{{.+}} : tensor<11x7x3x2xf32> into tensor<77x3x2xf32>
// MIXED: linalg.batch_matmul ins(%{{.+}}, %{{.+}} : tensor<77x2x3xf32>, tensor<77x3x2xf32>) outs(%{{.+}} : tensor<77x2x2xf32>)
// MIXED-NOT: linalg.matmul
// MIXED: tensor.collapse_shape %{{.+}} : tensor<7x2x2x3x2xf32> into tensor<7x4x6xf32>
// MIXED: tensor.collapse_shape %{{.+}} : tensor<2x4x2x6xf32> into tensor<8x12xf32>
// KRON-COUNT-49: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<2x3xf32>, tensor<3x3xf32>)
// KRON-NOT: linalg.matmul
func.func @l2(%a: tensor<8x12xf32>, %b: tensor<12x12xf32>, %c: tensor<8x12xf32>) -> tensor<8x12xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<8x12xf32>, tensor<12x12xf32>) outs(%c : tensor<8x12xf32>) -> tensor<8x12xf32>
  return %0 : tensor<8x12xf32>
}
