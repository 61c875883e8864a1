// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen" | FileCheck %s

// B stored N x K (x @ W.T, as imported linear layers are): the products keep
// the transposed indexing maps and the B blocks are cut along (N, K).

// CHECK-DAG: #[[MA:.+]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG: #[[MB:.+]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-LABEL: func.func @mm_tb
// CHECK-SAME: %[[B:[a-z0-9]+]]: tensor<10x6xf32>
// CHECK-DAG: tensor.extract_slice %[[B]][5, 3] [5, 3] [1, 1] : tensor<10x6xf32> to tensor<5x3xf32>
// CHECK-COUNT-7: linalg.matmul indexing_maps = [#[[MA]], #[[MB]], #{{.+}}] ins(%{{.+}}, %{{.+}} : tensor<4x3xf32>, tensor<5x3xf32>) outs(%{{.+}} : tensor<4x5xf32>)
// CHECK-NOT: linalg.matmul
func.func @mm_tb(%a: tensor<8x6xf32>, %b: tensor<10x6xf32>, %c: tensor<8x10xf32>) -> tensor<8x10xf32> {
  %0 = linalg.matmul indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>]
    ins(%a, %b : tensor<8x6xf32>, tensor<10x6xf32>) outs(%c : tensor<8x10xf32>) -> tensor<8x10xf32>
  return %0 : tensor<8x10xf32>
}
