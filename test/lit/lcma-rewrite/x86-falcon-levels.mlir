// RUN: falcon-opt %s --lcma-rewrite="profile=x86-falcon levels=2" --lcma-explain -o /dev/null 2>&1 | FileCheck %s

// Two levels asked for on x86-falcon: 4098 rows do not split into
// Strassen^2's 4 blocks, and falcon's CPU kernel pads nothing, so no plan is
// a candidate and the reason says why.

// CHECK: linalg.matmul M=4098 N=4096 K=4096 (f32 x f32 -> f32): classical
// CHECK-NEXT: why: auto: no plan divides M, N, K into blocks that are multiples of 1, K blocks >= 1024, M blocks >= 384, M blocks >= 512 where K blocks >= N blocks (the x86-falcon profile's block rules); classical
func.func @odd(%a: tensor<4098x4096xf32>, %b: tensor<4096x4096xf32>, %c: tensor<4098x4096xf32>) -> tensor<4098x4096xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<4098x4096xf32>, tensor<4096x4096xf32>) outs(%c : tensor<4098x4096xf32>) -> tensor<4098x4096xf32>
  return %0 : tensor<4098x4096xf32>
}
