// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen form=grouped" | FileCheck %s
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=2 form=grouped" | FileCheck %s --check-prefix=TWO

// The grouped (group-parallel) form: one op forms all 7 combined A blocks as
// a 7 x Mb x Kb tensor (coefficients from a constant table indexed by r),
// likewise B; one batched product over r; combine C reads the products out
// of the grouped result. Two levels compose the schemes (strassen x strassen,
// 49 products) into one grouped level.

// The combine's loops run (block row, r, block column): each row of a block
// is read once and serves all R outputs.
// CHECK-DAG: #[[BLK:.+]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG: #[[TAB:.+]] = affine_map<(d0, d1, d2) -> (d1)>
// CHECK-DAG: #[[OUT:.+]] = affine_map<(d0, d1, d2) -> (d1, d0, d2)>
// CHECK-LABEL: func.func @g
// CHECK: arith.constant dense<[1.000000e+00, 0.000000e+00, 1.000000e+00, 0.000000e+00, 1.000000e+00, -1.000000e+00, 0.000000e+00]> : tensor<7xf32>
// CHECK: linalg.generic {indexing_maps = [#[[BLK]], #[[TAB]], #[[BLK]], #[[TAB]], #[[BLK]], #[[TAB]], #[[BLK]], #[[TAB]], #[[OUT]]]
// CHECK-SAME: outs(%{{.+}} : tensor<7x4x3xf32>)
// CHECK: outs(%{{.+}} : tensor<7x3x2xf32>)
// CHECK: linalg.batch_matmul ins(%{{.+}}, %{{.+}} : tensor<7x4x3xf32>, tensor<7x3x2xf32>) outs(%{{.+}} : tensor<7x4x2xf32>)
// CHECK-NOT: linalg.batch_matmul
// CHECK-NOT: linalg.matmul
// CHECK: tensor.extract_slice %{{.+}}[0, 0, 0] [1, 4, 2] [1, 1, 1] : tensor<7x4x2xf32> to tensor<4x2xf32>
// CHECK: tensor.insert_slice %{{.+}} into %{{.+}}[4, 2] [4, 2] [1, 1] : tensor<4x2xf32> into tensor<8x4xf32>

// TWO: linalg.batch_matmul ins(%{{.+}}, %{{.+}} : tensor<49x2x1xf32>, tensor<49x1x1xf32>) outs(%{{.+}} : tensor<49x2x1xf32>)
// TWO-NOT: linalg.batch_matmul
func.func @g(%a: tensor<8x6xf32>, %b: tensor<6x4xf32>, %c: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<8x6xf32>, tensor<6x4xf32>) outs(%c : tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
