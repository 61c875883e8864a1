// RUN: falcon-opt %s --lcma-rewrite="profile=x86-falcon" --lcma-explain 2> %t.explain | FileCheck %s
// RUN: FileCheck %s --check-prefix=EXPLAIN --input-file=%t.explain

// The x86-falcon profile (falcon's own CPU kernel serves the f32 GEMMs): auto
// attaches kernel-form plans for the falcon-kernels pass, the kernel's 2R
// dispatches with the combines fused. Strassen at 4096^3 and, one level being
// the profile's most (max_levels 1), at 8192^3; 512^3 stays classical (its 256-blocks run at IREE's lower rate,
// and, narrower than the kernel's 512-column block, at 512/256 of that time);
// 4098 rows do not split into Strassen^2's 4 blocks (the kernel pads
// nothing), so with levels=2 asked for nothing runs: classical, and the
// reason says why; bf16 inputs are not the kernel's (f32 only), nor a C stored
// N x M (the kernel writes C row-major: falcon-kernels would leave the op to
// IREE; were, for a B stored N x K before the kernel read it: auto attached
// Strassen there, reported as rewritten, and IREE's classical GEMM ran). A B
// stored N x K the kernel reads (its packs transpose): the plain layout's plan.

// CHECK-LABEL: func.func @big
// CHECK: linalg.matmul {falcon.plan = {edge = "pad", form = "kernel", operands = "f32", schemes = ["strassen"]}}
// CHECK-LABEL: func.func @huge
// CHECK: linalg.matmul {falcon.plan = {edge = "pad", form = "kernel", operands = "f32", schemes = ["strassen"]}}
// CHECK-LABEL: func.func @small
// CHECK-NOT: falcon.plan
// CHECK-LABEL: func.func @bf16
// CHECK-NOT: falcon.plan
// CHECK-LABEL: func.func @transposed_b
// CHECK: linalg.matmul {{.*}}falcon.plan = {edge = "pad", form = "kernel", operands = "f32", schemes = ["strassen"]}
// CHECK-LABEL: func.func @transposed_c
// CHECK-NOT: falcon.plan
// CHECK: return

// EXPLAIN: linalg.matmul M=4096 N=4096 K=4096 (f32 x f32 -> f32): rewritten: strassen, 1 level(s), kernel form; 7 products, handed to falcon-kernels
// EXPLAIN-NEXT: why: auto: strassen (kernel) predicted 336 ms vs classical 381 ms (1.13x) on x86-falcon
// EXPLAIN-NEXT: predicted on x86-falcon: classical 381 ms, this plan 336 ms (1.13x), 14 dispatches
// EXPLAIN-NEXT: time by part: combine_b 3.75 ms, combine_c 7.96 ms, products 325 ms
// EXPLAIN: linalg.matmul M=8192 N=8192 K=8192 (f32 x f32 -> f32): rewritten: strassen, 1 level(s), kernel form; 7 products, handed to falcon-kernels
// EXPLAIN-NEXT: why: auto: strassen (kernel) predicted 2.73e+03 ms vs classical 3.09e+03 ms (1.13x) on x86-falcon
// EXPLAIN: linalg.matmul M=512 N=512 K=512 (f32 x f32 -> f32): classical
// EXPLAIN-NEXT: why: auto: no plan divides M, N, K into blocks that are multiples of 1, K blocks >= 1024, M blocks >= 384, M blocks >= 512 where K blocks >= N blocks (the x86-falcon profile's block rules); classical
// EXPLAIN: linalg.matmul M=4096 N=4096 K=4096 (bf16 x bf16 -> bf16): classical
// EXPLAIN-NEXT: why: auto: no plan runs on the kernels of x86-falcon (1 kernel-form plan left out; strassen: falcon's CPU kernel multiplies f32 x f32 -> f32 only, not bf16 x bf16 -> bf16); classical
// EXPLAIN: linalg.matmul M=4096 N=4096 K=4096 (f32 x f32 -> f32): rewritten: strassen, 1 level(s), kernel form; 7 products, handed to falcon-kernels
// EXPLAIN-NEXT: why: auto: strassen (kernel) predicted 336 ms vs classical 381 ms (1.13x) on x86-falcon
// EXPLAIN: linalg.generic M=4096 N=4096 K=4096 (f32 x f32 -> f32): classical
// EXPLAIN-NEXT: why: auto: no plan runs on the kernels of x86-falcon (1 kernel-form plan left out; strassen: falcon's CPU kernel writes C as M x N, row-major; C is stored transposed (N x M)); classical
// The plans handed to falcon-kernels, not built here (falcon-opt runs lcma-rewrite only), run classical:
// the summary counts their classical time (was: none, "642 ms vs 4.49 s classical (7.00x)").
// EXPLAIN: lcma-explain: 0 of 6 contractions rewritten (3 more handed to falcon-kernels, which left them classical: see their 'kernels' lines); predicted 4.49 s vs 4.49 s classical (1.00x over these contractions)
func.func @big(%a: tensor<4096x4096xf32>, %b: tensor<4096x4096xf32>, %c: tensor<4096x4096xf32>) -> tensor<4096x4096xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<4096x4096xf32>, tensor<4096x4096xf32>) outs(%c : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  return %0 : tensor<4096x4096xf32>
}
func.func @huge(%a: tensor<8192x8192xf32>, %b: tensor<8192x8192xf32>, %c: tensor<8192x8192xf32>) -> tensor<8192x8192xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<8192x8192xf32>, tensor<8192x8192xf32>) outs(%c : tensor<8192x8192xf32>) -> tensor<8192x8192xf32>
  return %0 : tensor<8192x8192xf32>
}
func.func @small(%a: tensor<512x512xf32>, %b: tensor<512x512xf32>, %c: tensor<512x512xf32>) -> tensor<512x512xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<512x512xf32>, tensor<512x512xf32>) outs(%c : tensor<512x512xf32>) -> tensor<512x512xf32>
  return %0 : tensor<512x512xf32>
}
func.func @bf16(%a: tensor<4096x4096xbf16>, %b: tensor<4096x4096xbf16>, %c: tensor<4096x4096xbf16>) -> tensor<4096x4096xbf16> {
  %0 = linalg.matmul ins(%a, %b : tensor<4096x4096xbf16>, tensor<4096x4096xbf16>) outs(%c : tensor<4096x4096xbf16>) -> tensor<4096x4096xbf16>
  return %0 : tensor<4096x4096xbf16>
}
func.func @transposed_b(%a: tensor<4096x4096xf32>, %b: tensor<4096x4096xf32>, %c: tensor<4096x4096xf32>) -> tensor<4096x4096xf32> {
  %0 = linalg.matmul indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>] ins(%a, %b : tensor<4096x4096xf32>, tensor<4096x4096xf32>) outs(%c : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  return %0 : tensor<4096x4096xf32>
}
func.func @transposed_c(%a: tensor<4096x4096xf32>, %b: tensor<4096x4096xf32>, %c: tensor<4096x4096xf32>) -> tensor<4096x4096xf32> {
  %0 = linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (n, m)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%a, %b : tensor<4096x4096xf32>, tensor<4096x4096xf32>) outs(%c : tensor<4096x4096xf32>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %z, %m : f32
    linalg.yield %s : f32
  } -> tensor<4096x4096xf32>
  return %0 : tensor<4096x4096xf32>
}
