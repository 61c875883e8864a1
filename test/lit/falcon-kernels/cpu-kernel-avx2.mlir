// falcon-kernels arch=x86-avx2: the CPU kernel's AVX2 build (6 x 16 micro-kernel, ymm registers) for an
// llvm-cpu target CPU with AVX2 and FMA but no AVX-512 (znver3 named here, so the test runs on any
// x86-64 machine with a C compiler; the kernel is not run). Its entry points carry _avx2 after the
// blocking, so an AVX-512 object cannot link in its place; the AVX-512 arch is refused for this CPU,
// the AVX2 one for a CPU without AVX2; an lcma-rewrite before it takes the AVX2 kernel's profile.
// REQUIRES: cpu-kernel-cc
// RUN: falcon-opt %s --falcon-kernels="x86-avx2 min-flops=0 cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=znver3" | FileCheck %s
// RUN: falcon-opt %s --falcon-kernels="x86-avx2 min-flops=0 cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=znver3" --lcma-report=%t.json -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT --input-file=%t.json
// RUN: not falcon-opt %s --falcon-kernels="x86-avx2 cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=nehalem" -o %t.no.mlir 2>&1 | FileCheck %s --check-prefix=NOAVX2
// RUN: not test -e %t.no.mlir
// RUN: not falcon-opt %s --falcon-kernels="x86-avx512 cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=znver3" -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOAVX512
// RUN: falcon-opt %s --lcma-rewrite --falcon-kernels="x86-avx2 classical=false cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=znver3" --lcma-explain -o /dev/null 2>&1 | FileCheck %s --check-prefix=PROFILE

// CHECK: #[[TGT:executable_target_embedded_elf_x86_64[0-9]*]] = #hal.executable.target<"llvm-cpu", "embedded-elf-x86_64", {cpu_features = "{{[^"]*}}+avx2{{[^"]*}}", target_triple = "x86_64-unknown-unknown-eabi-elf"}>
// CHECK-NOT: +avx512f
// CHECK: func.func private @[[CALL:falcon_cpu_sgemm_6x16_k256_24x256_p16_[0-9a-f]{8}_300x200x500_call]](%[[A:.+]]: tensor<300x500xf32>, %[[B:.+]]: tensor<500x200xf32>) -> tensor<300x200xf32>
// CHECK: %[[BP:.+]] = flow.dispatch @[[EXE:falcon_cpu_sgemm_6x16_k256_24x256_p16_[0-9a-f]{8}]]::@[[EXE]]_pack_b[%{{.+}}](%[[B]], %{{.+}}, %{{.+}}, %{{.+}}) : (tensor<500x200xf32>, index, index, index) -> tensor<104000xf32>
// CHECK: %[[R:.+]]:2 = flow.dispatch @[[EXE]]::@[[EXE]]_gemm[%{{.+}}, %{{.+}}](%[[A]], %[[BP]], %{{.+}}, %{{.+}}, %{{.+}})
// CHECK: return %[[R]]#0 : tensor<300x200xf32>
// CHECK: stream.executable private @[[EXE]] attributes {hal.executable.objects = #hal.executable.objects<{#[[TGT]] = [#hal.executable.object<{path = "{{.+}}.o"}>]}>}
// CHECK: func.func private @falcon_cpu_pack_b_6x16_k256_24x256_p16_avx2({{.+}}) attributes {hal.import.static}
// CHECK: func.func private @falcon_cpu_gemm_6x16_k256_24x256_p16_avx2({{.+}}) attributes {hal.import.static}
// CHECK-LABEL: func.func @zero_init
// CHECK-NOT: linalg.matmul
// CHECK: %[[C:.+]] = call @[[CALL]](%arg0, %arg1)
// CHECK: return %[[C]]
func.func @zero_init(%a: tensor<300x500xf32>, %b: tensor<500x200xf32>) -> tensor<300x200xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<300x200xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<300x200xf32>) -> tensor<300x200xf32>
  %0 = linalg.matmul ins(%a, %b : tensor<300x500xf32>, tensor<500x200xf32>) outs(%f : tensor<300x200xf32>) -> tensor<300x200xf32>
  return %0 : tensor<300x200xf32>
}

// 4096^3: large enough for auto to rewrite on the AVX2 kernel's profile.
func.func @square(%a: tensor<4096x4096xf32>, %b: tensor<4096x4096xf32>) -> tensor<4096x4096xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4096x4096xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  %0 = linalg.matmul ins(%a, %b : tensor<4096x4096xf32>, tensor<4096x4096xf32>) outs(%f : tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  return %0 : tensor<4096x4096xf32>
}

// REPORT: "kernel": "classical"
// REPORT: "reason": "falcon's CPU GEMM kernel"
// REPORT: "config": "cpu6x16,k256,24x256,avx2"
// REPORT: "arch": "x86-avx2"

// NOAVX2: error: falcon-kernels: arch=x86-avx2 needs AVX2 and FMA (x86-64-v3) on the target CPU; the llvm-cpu target of cpu-flags={{.+}}target-cpu=nehalem lacks +avx, +avx2, +fma, +f16c, +bmi2
// NOAVX512: error: falcon-kernels: arch=x86-avx512 needs AVX-512 F/BW/DQ/VL on the target CPU; {{.+}}target-cpu=znver3 lacks +avx512f

// PROFILE: linalg.matmul M=4096 N=4096 K=4096 (f32 x f32 -> f32): rewritten: strassen, 1 level(s), kernel form; 7 products, handed to falcon-kernels
// PROFILE-NEXT: why: auto: strassen (kernel) predicted {{.+}} on x86-falcon-avx2
// PROFILE-NEXT: defaults: profile=x86-falcon-avx2 (falcon-kernels on (x86-avx2)
// PROFILE: kernels: plan strassen (R = 7) on falcon's CPU kernel {{.+}} as 14 x86-avx2 dispatches
