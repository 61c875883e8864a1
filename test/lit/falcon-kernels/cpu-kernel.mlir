// falcon-kernels arch=x86-avx512: f32 GEMMs become two dispatches of falcon's CPU kernel (pack B,
// then the GEMM) in a stream.executable whose object is keyed by the target triple of cpu-flags
// (a named CPU here, so the test runs on any x86-64 machine with a C compiler; the kernel is not run).
// REQUIRES: cpu-kernel-cc
// RUN: falcon-opt %s --split-input-file --falcon-kernels="x86-avx512 min-flops=0 cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=znver4" | FileCheck %s
// RUN: falcon-opt %s --split-input-file --falcon-kernels="x86-avx512 min-flops=0 cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=znver4" --lcma-report=%t.json -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT --input-file=%t.json
// RUN: falcon-opt %s --split-input-file --falcon-kernels="x86-avx512 cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=znver4" --lcma-report=%t.small.json -o /dev/null
// RUN: FileCheck %s --check-prefix=SMALL --input-file=%t.small.json

// A zero-filled accumulator: the call replaces the matmul.
// CHECK: #[[TGT:executable_target_embedded_elf_x86_64[0-9]*]] = #hal.executable.target<"llvm-cpu", "embedded-elf-x86_64", {target_triple = "x86_64-unknown-unknown-eabi-elf"}>
// CHECK: func.func private @[[CALL:falcon_cpu_sgemm_14x32_k256_28x256_p16_[0-9a-f]{8}_300x200x500_call]](%[[A:.+]]: tensor<300x500xf32>, %[[B:.+]]: tensor<500x200xf32>) -> tensor<300x200xf32>
// CHECK: %[[BP:.+]] = flow.dispatch @[[EXE:falcon_cpu_sgemm_14x32_k256_28x256_p16_[0-9a-f]{8}]]::@[[EXE]]_pack_b[%{{.+}}](%[[B]], %{{.+}}, %{{.+}}, %{{.+}}) : (tensor<500x200xf32>, index, index, index) -> tensor<{{[0-9]+}}xf32>
// CHECK: %[[R:.+]]:2 = flow.dispatch @[[EXE]]::@[[EXE]]_gemm[%{{.+}}, %{{.+}}](%[[A]], %[[BP]], %{{.+}}, %{{.+}}, %{{.+}}) : (tensor<300x500xf32>, tensor<{{[0-9]+}}xf32>, index, index, index) -> (tensor<300x200xf32>, tensor<{{[0-9]+}}xf32>)
// CHECK: return %[[R]]#0 : tensor<300x200xf32>
// CHECK: stream.executable private @[[EXE]] attributes {hal.executable.objects = #hal.executable.objects<{#[[TGT]] = [#hal.executable.object<{path = "{{.+}}.o"}>]}>}
// CHECK: stream.executable.export public @[[EXE]]_pack_b workgroups
// CHECK: stream.executable.export public @[[EXE]]_gemm workgroups
// CHECK: func.func private @falcon_cpu_pack_b_14x32_k256_28x256_p16({{.+}}) attributes {hal.import.static}
// CHECK: func.func private @falcon_cpu_gemm_14x32_k256_28x256_p16({{.+}}) attributes {hal.import.static}
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

// -----

// A batch of 1 and a live accumulator: the kernel reads the same buffers, its M x N result is
// reshaped to the op's type and C0 is added by an elementwise op. A transposed B stays IREE's.
// CHECK: func.func private @[[CALL2:falcon_cpu_sgemm_14x32_k256_28x256_p16_[0-9a-f]{8}_64x96x128_call_[0-9a-f]{8}]](%{{.+}}: tensor<1x64x128xf32>, %{{.+}}: tensor<1x128x96xf32>) -> tensor<1x64x96xf32>
// CHECK: flow.tensor.reshape %{{.+}}#0 : tensor<64x96xf32> -> tensor<1x64x96xf32>
// CHECK-LABEL: func.func @batch_of_one
// CHECK: %[[P:.+]] = call @[[CALL2]](%arg0, %arg1) : (tensor<1x64x128xf32>, tensor<1x128x96xf32>) -> tensor<1x64x96xf32>
// CHECK: linalg.generic {{.*}} ins(%[[P]] : tensor<1x64x96xf32>) outs(%arg2 : tensor<1x64x96xf32>)
// CHECK: arith.addf
// CHECK-LABEL: func.func @transposed_b
// CHECK: linalg.matmul
func.func @batch_of_one(%a: tensor<1x64x128xf32>, %b: tensor<1x128x96xf32>, %c: tensor<1x64x96xf32>) -> tensor<1x64x96xf32> {
  %0 = linalg.batch_matmul ins(%a, %b : tensor<1x64x128xf32>, tensor<1x128x96xf32>) outs(%c : tensor<1x64x96xf32>) -> tensor<1x64x96xf32>
  return %0 : tensor<1x64x96xf32>
}
func.func @transposed_b(%a: tensor<64x128xf32>, %b: tensor<96x128xf32>, %c: tensor<64x96xf32>) -> tensor<64x96xf32> {
  %0 = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>] ins(%a, %b : tensor<64x128xf32>, tensor<96x128xf32>) outs(%c : tensor<64x96xf32>) -> tensor<64x96xf32>
  return %0 : tensor<64x96xf32>
}

// REPORT: "kernel": "classical"
// REPORT: "reason": "falcon's CPU GEMM kernel"
// REPORT: "config": "cpu14x32,k256,28x256"
// REPORT: "arch": "x86-avx512"
// REPORT: "accumulate": false
// REPORT: "kernel": "classical"
// REPORT: "accumulate": true
// REPORT: "kernel": null
// REPORT: "reason": "left to IREE: B is transposed (stored N x K): falcon's CPU kernel reads A as M x K and B as K x N, row-major (no transposed form yet)"

// Below the default min-flops (2 x 256^3) IREE keeps the contraction.
// SMALL: "reason": "falcon's CPU GEMM kernel"
// SMALL: "reason": "left to IREE: 1.57e+06 FLOP < min-flops 3.36e+07"
