// falcon-opt decides as falcon-compile does when falcon-kernels runs later in the pipeline: an
// lcma-rewrite whose options leave the profile auto takes the profile of falcon's kernels
// (x86-falcon for arch=x86-avx512: the kernel form, 14 dispatches at 4096^3), and the report names
// the default. A profile given (profile=host: IREE's own GEMM, the per-product form) and
// falcon-kernels=none are left alone. Before, all three decided on the host profile.
// REQUIRES: cpu-kernel-cc
// RUN: falcon-opt %s --lcma-rewrite --falcon-kernels="x86-avx512 cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=znver4" --lcma-explain -o /dev/null 2>&1 | FileCheck %s --check-prefix=KERNEL
// RUN: falcon-opt %s --lcma-rewrite=profile=host --falcon-kernels="x86-avx512 cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=znver4" --lcma-explain -o /dev/null 2>&1 | FileCheck %s --check-prefix=GIVEN
// RUN: falcon-opt %s --lcma-rewrite --falcon-kernels=none --lcma-explain -o /dev/null 2>&1 | FileCheck %s --check-prefix=NONE
// A target CPU without AVX512-BF16 named in cpu-flags (skylake-avx512: AVX-512, so falcon-compile runs the
// kernel there) implies x86-avx2 before the kernel's profile, as in falcon-compile (pipeline.assemble
// CPU_DEFAULTS: its bf16 is emulated); were: x86-falcon, so bf16 2048^3 stayed classical in falcon-opt
// (3.64 s predicted on x86-avx2) where falcon-compile takes Strassen with f32 products (53 ms).
// RUN: falcon-opt %s --lcma-rewrite --falcon-kernels="x86-avx512 classical=false cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=skylake-avx512" --lcma-explain -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOBF16

// KERNEL: linalg.matmul M=4096 N=4096 K=4096 (f32 x f32 -> f32): rewritten: strassen, 1 level(s), kernel form; 7 products, handed to falcon-kernels
// KERNEL-NEXT: why: auto: strassen (kernel) predicted 336 ms vs classical 381 ms (1.13x) on x86-falcon
// KERNEL-NEXT: defaults: profile=x86-falcon (falcon-kernels on (x86-avx512): the profile of falcon's CPU kernel
// KERNEL: kernels: plan strassen (R = 7) on falcon's CPU kernel {{.+}} as 14 x86-avx512 dispatches

// GIVEN: rewritten: strassen, 1 level(s), per-product form
// GIVEN-NEXT: why: auto: {{.+}} on host
// GIVEN-NOT: defaults: profile=

// NONE: why: auto: {{.+}} on host
// NONE-NOT: defaults: profile=

// NOBF16: why: auto: {{.+}} on x86-avx2
// NOBF16-NEXT: defaults: profile=x86-avx2 (llvm-cpu target cpu skylake-avx512: no AVX512-BF16
// NOBF16-NOT: x86-falcon
func.func @big(%a: tensor<4096x4096xf32>, %b: tensor<4096x4096xf32>, %c: tensor<4096x4096xf32>) -> tensor<4096x4096xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<4096x4096xf32>, tensor<4096x4096xf32>) outs(%c : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  return %0 : tensor<4096x4096xf32>
}
