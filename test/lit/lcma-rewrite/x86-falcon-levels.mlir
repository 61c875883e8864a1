// RUN: falcon-opt %s --lcma-rewrite="profile=x86-falcon levels=2" --lcma-explain -o /dev/null 2>&1 | FileCheck %s

// Two levels asked for on x86-falcon: 4098 rows do not split into
// Strassen^2's 4 blocks, and falcon's CPU kernel pads nothing, so no plan is
// a candidate and the reason says why.

// CHECK: linalg.matmul M=4098 N=4096 K=4096 (f32 x f32 -> f32): classical
// CHECK-NEXT: why: auto: no plan runs on the kernels of x86-falcon (1 kernel-form plan left out; strassen+strassen: 4098x4096x4096 (MxNxK) is not a multiple of strassen*strassen's format <4,4,4> (falcon's CPU kernel pads nothing)); classical
func.func @odd(%a: tensor<4098x4096xf32>, %b: tensor<4096x4096xf32>, %c: tensor<4098x4096xf32>) -> tensor<4098x4096xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<4098x4096xf32>, tensor<4096x4096xf32>) outs(%c : tensor<4098x4096xf32>) -> tensor<4098x4096xf32>
  return %0 : tensor<4098x4096xf32>
}
