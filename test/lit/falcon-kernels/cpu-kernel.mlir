// falcon-kernels arch=x86-avx512: f32 GEMMs become two dispatches of falcon's CPU kernel (pack B,
// then the GEMM) in a stream.executable whose object is keyed by the CPU features and target triple of cpu-flags
// (a named CPU here, so the test runs on any x86-64 machine with a C compiler; the kernel is not run).
// REQUIRES: cpu-kernel-cc
// RUN: falcon-opt %s --split-input-file --falcon-kernels="x86-avx512 min-flops=0 cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=znver4" | FileCheck %s
// RUN: falcon-opt %s --split-input-file --falcon-kernels="x86-avx512 min-flops=0 cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=znver4" --lcma-report=%t.json -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT --input-file=%t.json
// RUN: falcon-opt %s --split-input-file --falcon-kernels="x86-avx512 cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=znver4" --lcma-report=%t.small.json -o /dev/null
// RUN: FileCheck %s --check-prefix=SMALL --input-file=%t.small.json

// A zero-filled accumulator: the call replaces the matmul.
// CHECK: #[[TGT:executable_target_embedded_elf_x86_64[0-9]*]] = #hal.executable.target<"llvm-cpu", "embedded-elf-x86_64", {cpu_features = "{{[^"]*}}+avx512f{{[^"]*}}", target_triple = "x86_64-unknown-unknown-eabi-elf"}>
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
// reshaped to the op's type and C0 is added by an elementwise op.
// CHECK: func.func private @[[CALL2:falcon_cpu_sgemm_14x32_k256_28x256_p16_[0-9a-f]{8}_64x96x128_call_[0-9a-f]{8}]](%{{.+}}: tensor<1x64x128xf32>, %{{.+}}: tensor<1x128x96xf32>) -> tensor<1x64x96xf32>
// CHECK: flow.tensor.reshape %{{.+}}#0 : tensor<64x96xf32> -> tensor<1x64x96xf32>
// CHECK-LABEL: func.func @batch_of_one
// CHECK: %[[P:.+]] = call @[[CALL2]](%arg0, %arg1) : (tensor<1x64x128xf32>, tensor<1x128x96xf32>) -> tensor<1x64x96xf32>
// CHECK: linalg.generic {{.*}} ins(%[[P]] : tensor<1x64x96xf32>) outs(%arg2 : tensor<1x64x96xf32>)
// CHECK: arith.addf
func.func @batch_of_one(%a: tensor<1x64x128xf32>, %b: tensor<1x128x96xf32>, %c: tensor<1x64x96xf32>) -> tensor<1x64x96xf32> {
  %0 = linalg.batch_matmul ins(%a, %b : tensor<1x64x128xf32>, tensor<1x128x96xf32>) outs(%c : tensor<1x64x96xf32>) -> tensor<1x64x96xf32>
  return %0 : tensor<1x64x96xf32>
}

// -----

// Transposed operands and batches: matmul_transpose_a and matmul_transpose_b (linalg.matmul with those
// maps), batch_matmul, and the batched generic with B stored N x K that StableHLO's import makes of
// attention's Q K^T. Each runs the general exports (pack B transposing where B is N x K, the GEMM packing
// A transposed where A is K x M; batch: the pack's workgroup y, the GEMM's z), the layout flags and the
// batch as push constants; one executable, one wrapper per layout. C stored N x M stays IREE's.
// CHECK: func.func private @[[QKT:falcon_cpu_sgemm_14x32_k256_112x512_p16_[0-9a-f]{8}_1024x1024x128_b32_tb_call]](%[[Q:.+]]: tensor<32x1024x128xf32>, %[[K:.+]]: tensor<32x1024x128xf32>) -> tensor<32x1024x1024xf32>
// CHECK-DAG: %[[TB1:.+]] = arith.constant 1 : index
// CHECK-DAG: %[[B32:.+]] = arith.constant 32 : index
// CHECK-DAG: %[[GZ:.+]] = arith.constant 4 : index
// CHECK: %[[KP:.+]] = flow.dispatch @[[EXE:falcon_cpu_sgemm_14x32_k256_112x512_p16_[0-9a-f]{8}]]::@[[EXE]]_general_pack_b[%{{.+}}, %[[B32]]](%[[K]], %{{.+}}, %{{.+}}, %[[TB1]]) : (tensor<32x1024x128xf32>, index, index, index) -> tensor<4194304xf32>
// CHECK: %[[S:.+]]:2 = flow.dispatch @[[EXE]]::@[[EXE]]_general_gemm[%{{.+}}, %{{.+}}, %[[GZ]]](%[[Q]], %[[KP]], %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %[[B32]]) : (tensor<32x1024x128xf32>, tensor<4194304xf32>, index, index, index, index, index) -> (tensor<32x1024x1024xf32>, tensor<{{[0-9]+}}xf32>)
// CHECK: return %[[S]]#0 : tensor<32x1024x1024xf32>
// CHECK: stream.executable private @[[EXE]]
// CHECK: stream.executable.export public @[[EXE]]_general_pack_b workgroups(%{{.+}}: index, %{{.+}}: index)
// CHECK: stream.executable.export public @[[EXE]]_general_gemm workgroups(%{{.+}}: index, %{{.+}}: index, %{{.+}}: index)
// CHECK: func.func private @falcon_cpu_general_pack_b_14x32_k256_112x512_p16({{.+}}) attributes {hal.import.static}
// CHECK: func.func private @falcon_cpu_general_gemm_14x32_k256_112x512_p16({{.+}}) attributes {hal.import.static}
// CHECK-DAG: func.func private @[[BMM:falcon_cpu_sgemm_14x32_k256_28x256_p16_[0-9a-f]{8}_64x96x128_b32_call]](%{{.+}}: tensor<32x64x128xf32>, %{{.+}}: tensor<32x128x96xf32>) -> tensor<32x64x96xf32>
// CHECK-DAG: func.func private @[[TB:falcon_cpu_sgemm_14x32_k256_28x256_p16_[0-9a-f]{8}_64x96x128_tb_call]](%{{.+}}: tensor<64x128xf32>, %{{.+}}: tensor<96x128xf32>) -> tensor<64x96xf32>
// CHECK-DAG: func.func private @[[TA:falcon_cpu_sgemm_14x32_k256_28x256_p16_[0-9a-f]{8}_64x96x128_ta_call]](%{{.+}}: tensor<128x64xf32>, %{{.+}}: tensor<128x96xf32>) -> tensor<64x96xf32>
// CHECK-LABEL: func.func @transpose_a
// CHECK-NOT: linalg.matmul
// CHECK: call @[[TA]](%arg0, %arg1)
// CHECK-LABEL: func.func @transpose_b
// CHECK-NOT: linalg.matmul
// CHECK: call @[[TB]](%arg0, %arg1)
// CHECK-LABEL: func.func @batch_matmul
// CHECK-NOT: linalg.batch_matmul
// CHECK: call @[[BMM]](%arg0, %arg1)
// CHECK-LABEL: func.func @attention_qkt
// CHECK: %[[P:.+]] = call @[[QKT]](%arg0, %arg1)
// CHECK-NOT: linalg.generic
// CHECK: return %[[P]]
// CHECK-LABEL: func.func @transposed_c
// CHECK: linalg.generic
func.func @transpose_a(%a: tensor<128x64xf32>, %b: tensor<128x96xf32>, %c: tensor<64x96xf32>) -> tensor<64x96xf32> {
  %0 = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d2, d0)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>] ins(%a, %b : tensor<128x64xf32>, tensor<128x96xf32>) outs(%c : tensor<64x96xf32>) -> tensor<64x96xf32>
  return %0 : tensor<64x96xf32>
}
func.func @transpose_b(%a: tensor<64x128xf32>, %b: tensor<96x128xf32>, %c: tensor<64x96xf32>) -> tensor<64x96xf32> {
  %0 = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>] ins(%a, %b : tensor<64x128xf32>, tensor<96x128xf32>) outs(%c : tensor<64x96xf32>) -> tensor<64x96xf32>
  return %0 : tensor<64x96xf32>
}
func.func @batch_matmul(%a: tensor<32x64x128xf32>, %b: tensor<32x128x96xf32>, %c: tensor<32x64x96xf32>) -> tensor<32x64x96xf32> {
  %0 = linalg.batch_matmul ins(%a, %b : tensor<32x64x128xf32>, tensor<32x128x96xf32>) outs(%c : tensor<32x64x96xf32>) -> tensor<32x64x96xf32>
  return %0 : tensor<32x64x96xf32>
}
func.func @attention_qkt(%q: tensor<32x1024x128xf32>, %k: tensor<32x1024x128xf32>) -> tensor<32x1024x1024xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<32x1024x1024xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<32x1024x1024xf32>) -> tensor<32x1024x1024xf32>
  %0 = linalg.generic {indexing_maps = [affine_map<(b, m, n, k) -> (b, m, k)>, affine_map<(b, m, n, k) -> (b, n, k)>, affine_map<(b, m, n, k) -> (b, m, n)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%q, %k : tensor<32x1024x128xf32>, tensor<32x1024x128xf32>) outs(%f : tensor<32x1024x1024xf32>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %z, %p : f32
    linalg.yield %s : f32
  } -> tensor<32x1024x1024xf32>
  return %0 : tensor<32x1024x1024xf32>
}
func.func @transposed_c(%a: tensor<64x128xf32>, %b: tensor<128x96xf32>, %c: tensor<96x64xf32>) -> tensor<96x64xf32> {
  %0 = linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (n, m)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%a, %b : tensor<64x128xf32>, tensor<128x96xf32>) outs(%c : tensor<96x64xf32>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %z, %p : f32
    linalg.yield %s : f32
  } -> tensor<96x64xf32>
  return %0 : tensor<96x64xf32>
}

// REPORT: "kernel": "classical"
// REPORT: "reason": "falcon's CPU GEMM kernel"
// REPORT: "config": "cpu14x32,k256,28x256"
// REPORT: "arch": "x86-avx512"
// REPORT: "accumulate": false
// REPORT: "kernel": "classical"
// REPORT: "accumulate": true
// REPORT: "kernel": "classical"
// REPORT: "layout": "A stored K x M"
// REPORT: "kernel": "classical"
// REPORT: "layout": "B stored N x K"
// REPORT: "kernel": "classical"
// REPORT: "layout": "batch 32"
// REPORT: "kernel": "classical"
// REPORT: "layout": "B stored N x K, batch 32"
// REPORT: "kernel": null
// REPORT: "reason": "left to IREE: C is transposed (stored N x M): falcon's CPU kernel writes C as M x N, row-major"

// Below the default min-flops (2 x 256^3) IREE keeps the contraction.
// SMALL: "reason": "falcon's CPU GEMM kernel"
// SMALL: "reason": "left to IREE: 1.57e+06 FLOP < min-flops 3.36e+07"
