// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=1" 2> %t.err | FileCheck %s
// RUN: FileCheck %s --check-prefix=REMARK --input-file=%t.err
// RUN: falcon-opt %s --lcma-rewrite --lcma-explain -o /dev/null 2>&1 | FileCheck %s --check-prefix=EXPLAIN

// A module marked rewritten (falcon.lcma_rewritten: by a user, or a rewritten module with functions added
// to it) is left as it is, but for a contraction over an empty reduction (K = 0): lcma-rewrite replaces
// those by their init under every option, and falcon-compile runs no empty-reduction pass where
// lcma-rewrite runs, so a K = 0 matmul left here reached IREE 3.13, which crashes on it (SIGFPE).
// The other matmul, its products or not, is left as it is.

// CHECK: module attributes {falcon.lcma_rewritten}
// CHECK-LABEL: func.func @empty
// CHECK-NOT: linalg.matmul
// CHECK: return %[[FILL:.+]] : tensor<64x32xf32>
// CHECK-LABEL: func.func @kept
// CHECK-COUNT-1: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x6xf32>, tensor<6x4xf32>)
// CHECK-NOT: linalg.matmul

// REMARK: remark: lcma-rewrite: the module was rewritten by lcma-rewrite before (falcon.lcma_rewritten): left as it is

// EXPLAIN: linalg.matmul M=64 N=32 K=0 (f32 x f32 -> f32): replaced by its init
// EXPLAIN: lcma-explain: 0 of 1 contractions rewritten, 1 replaced by its init (K = 0)

module attributes {falcon.lcma_rewritten} {
  func.func @empty(%a: tensor<64x0xf32>, %b: tensor<0x32xf32>) -> tensor<64x32xf32> {
    %one = arith.constant 1.0 : f32
    %e = tensor.empty() : tensor<64x32xf32>
    %f = linalg.fill ins(%one : f32) outs(%e : tensor<64x32xf32>) -> tensor<64x32xf32>
    %r = linalg.matmul ins(%a, %b : tensor<64x0xf32>, tensor<0x32xf32>) outs(%f : tensor<64x32xf32>) -> tensor<64x32xf32>
    return %r : tensor<64x32xf32>
  }
  func.func @kept(%a: tensor<8x6xf32>, %b: tensor<6x4xf32>, %c: tensor<8x4xf32>) -> tensor<8x4xf32> {
    %r = linalg.matmul ins(%a, %b : tensor<8x6xf32>, tensor<6x4xf32>) outs(%c : tensor<8x4xf32>) -> tensor<8x4xf32>
    return %r : tensor<8x4xf32>
  }
}
