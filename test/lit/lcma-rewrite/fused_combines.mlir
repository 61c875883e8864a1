// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen form=grouped target=h200-iree" --falcon-tiles=target=cuda-sm80 | FileCheck %s
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen target=h200-iree" | FileCheck %s --check-prefix=PP
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen form=grouped" | FileCheck %s --check-prefix=HOST

// On a GPU profile (h200-iree) combine C is one op over the whole output
// viewed as 2 x 2 blocks, with no insert_slice; falcon-tiles gives every
// combine a tile choice where one thread forms all R = 7 combined operands
// (group dim r) or all 2 x 2 output blocks (group dims a, b) from 4 floats.
// CHECK: #[[CA:[a-z0-9_]+]] = #iree_codegen.compilation_info<lowering_config = #iree_gpu.lowering_config<{thread = [1, 7, 4], workgroup = [8, 7, 128]}>
// CHECK: #[[CC:[a-z0-9_]+]] = #iree_codegen.compilation_info<lowering_config = #iree_gpu.lowering_config<{thread = [2, 1, 2, 4], workgroup = [2, 8, 2, 128]}>
// CHECK: func.func @f32
// CHECK-NOT: tensor.insert_slice
// combine A: loops (row, r, column), all 7 operands in one tensor
// CHECK: linalg.generic {{.+}} ins({{.+}}) outs({{.+}} : tensor<7x128x128xf32>) attrs = {compilation_info = #[[CA]], falcon.combine = array<i64: 1>}
// combine B
// CHECK: linalg.generic {{.+}} outs({{.+}} : tensor<7x128x128xf32>) attrs = {compilation_info = #[[CA]], falcon.combine = array<i64: 1>}
// CHECK: linalg.batch_matmul
// CHECK: %[[E:.+]] = tensor.expand_shape %arg2 {{\[}}[0, 1], [2, 3]] output_shape [2, 128, 2, 128] : tensor<256x256xf32> into tensor<2x128x2x128xf32>
// CHECK: %[[C:.+]] = linalg.generic {{.+}} outs(%[[E]] : tensor<2x128x2x128xf32>) attrs = {compilation_info = #[[CC]], falcon.combine = array<i64: 0, 2>}
// The body: C0 plus each product times its coefficient W[r][a][b] from a 2 x 2 table.
// CHECK: arith.select
// CHECK: } -> tensor<2x128x2x128xf32>
// CHECK: %[[R:.+]] = tensor.collapse_shape %[[C]] {{\[}}[0, 1], [2, 3]] : tensor<2x128x2x128xf32> into tensor<256x256xf32>
// CHECK-NOT: tensor.insert_slice
// CHECK: return %[[R]]

// Per-product form on a GPU profile: 7 products, then the same one combine C
// reading all 7 (tables of 2 x 2 coefficients).
// PP: func.func @f32
// PP-COUNT-7: linalg.matmul
// PP: tensor.expand_shape %arg2
// PP: linalg.generic {{.+}} ins({{.+}} : tensor<128x128xf32>, tensor<2x2xf32>, {{.+}}) outs({{.+}} : tensor<2x128x2x128xf32>) attrs = {falcon.combine = array<i64: 0, 2>}
// PP: tensor.collapse_shape
// PP-NOT: tensor.insert_slice

// On the CPU profile combine C stays one op per output block, written back with
// insert_slice (IREE's CPU codegen writes those in place).
// HOST: func.func @f32
// HOST-NOT: tensor.expand_shape
// HOST-COUNT-4: tensor.insert_slice
// HOST-NOT: tensor.collapse_shape
func.func @f32(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>, %c: tensor<256x256xf32>) -> tensor<256x256xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<256x256xf32>, tensor<256x256xf32>) outs(%c : tensor<256x256xf32>) -> tensor<256x256xf32>
  return %0 : tensor<256x256xf32>
}
