// falcon-kernels: contractions become dispatches of falcon's generated sm_90a kernels.
// REQUIRES: triton
// RUN: falcon-opt %s --split-input-file --falcon-kernels="min-flops=0 min-intensity=0" | FileCheck %s
// RUN: falcon-opt %s --split-input-file --falcon-kernels="min-flops=0 min-intensity=0" --lcma-report=%t.json -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT --input-file=%t.json
// RUN: falcon-opt %s --split-input-file --falcon-kernels --lcma-report=%t.small.json -o /dev/null
// RUN: FileCheck %s --check-prefix=SMALL --input-file=%t.small.json

// A zero-filled accumulator: the call replaces the matmul.
// CHECK: #[[TGT:executable_target_cuda_nvptx_fb]] = #hal.executable.target<"cuda", "cuda-nvptx-fb"
// CHECK: #[[LAYOUT:pipeline_layout]] = #hal.pipeline.layout<bindings = [#hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>, #hal.pipeline.binding<storage_buffer>]>
// CHECK: hal.executable.source private @[[EXE:falcon_gemm_bf16_512x384x256_nn_of32_[0-9a-f]+]] <objects = <{#[[TGT]] = [#hal.executable.object<{path = "[[EXE]].cubin", data = dense<"0x7F454C46
// CHECK: hal.executable.export public @falcon_gemm ordinal(0) layout(#[[LAYOUT]]) count(%{{.+}}: !hal.device)
// CHECK: hal.return
// CHECK: } <workgroup_size = [{{[0-9]+}} : index, 1 : index, 1 : index], workgroup_local_memory = {{[0-9]+}}>
// CHECK: func.func private @[[EXE]]_call(%[[A:.+]]: tensor<512x256xbf16>, %[[B:.+]]: tensor<256x384xbf16>) -> tensor<512x384xf32>
// CHECK: %[[R:.+]]:3 = flow.dispatch @[[EXE]]::@falcon_gemm(%[[A]], %[[B]]) : (tensor<512x256xbf16>, tensor<256x384xbf16>) -> (tensor<512x384xf32>, tensor<{{[0-9]+}}xi8>, tensor<128xi8>)
// CHECK: return %[[R]]#0 : tensor<512x384xf32>
// CHECK-LABEL: func.func @zero_init
// CHECK-NOT: linalg.matmul
// CHECK: %[[C:.+]] = call @[[EXE]]_call(%arg0, %arg1)
// CHECK: return %[[C]]
func.func @zero_init(%a: tensor<512x256xbf16>, %b: tensor<256x384xbf16>) -> tensor<512x384xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<512x384xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<512x384xf32>) -> tensor<512x384xf32>
  %0 = linalg.matmul ins(%a, %b : tensor<512x256xbf16>, tensor<256x384xbf16>) outs(%f : tensor<512x384xf32>) -> tensor<512x384xf32>
  return %0 : tensor<512x384xf32>
}

// -----

// A live accumulator and a transposed B: the kernel reads B as stored (N x K)
// and C0 is added by an elementwise op.
// CHECK: hal.executable.source private @[[EXE2:falcon_gemm_f16_256x384x512_nt_of16_[0-9a-f]+]]
// CHECK-LABEL: func.func @accumulate
// CHECK: %[[P:.+]] = call @[[EXE2]]_call(%arg0, %arg1) : (tensor<256x512xf16>, tensor<384x512xf16>) -> tensor<256x384xf16>
// CHECK: linalg.generic {{.*}} ins(%[[P]] : tensor<256x384xf16>) outs(%arg2 : tensor<256x384xf16>)
// CHECK: arith.addf
func.func @accumulate(%a: tensor<256x512xf16>, %b: tensor<384x512xf16>, %c: tensor<256x384xf16>) -> tensor<256x384xf16> {
  %0 = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>] ins(%a, %b : tensor<256x512xf16>, tensor<384x512xf16>) outs(%c : tensor<256x384xf16>) -> tensor<256x384xf16>
  return %0 : tensor<256x384xf16>
}

// -----

// f64 is not served: the op stays.
// CHECK-LABEL: func.func @f64
// CHECK: linalg.matmul
func.func @f64(%a: tensor<256x256xf64>, %b: tensor<256x256xf64>, %c: tensor<256x256xf64>) -> tensor<256x256xf64> {
  %0 = linalg.matmul ins(%a, %b : tensor<256x256xf64>, tensor<256x256xf64>) outs(%c : tensor<256x256xf64>) -> tensor<256x256xf64>
  return %0 : tensor<256x256xf64>
}

// REPORT: "kernel": "classical"
// REPORT: "reason": "falcon's classical GEMM kernel"
// REPORT: "config": "{{[0-9]+x[0-9]+x[0-9]+,s[0-9],w[0-9],g[0-9]+.*}}"
// REPORT: "arch": "sm_90a"
// REPORT: "reason": "left to IREE: f64 x f64 -> f64: the kernels take f32, f16 or bf16"
// REPORT: "reason": "falcon's classical GEMM kernel; B read through the transpose that made it"

// Below the default min-flops (2^27) IREE keeps the contraction.
// SMALL: "reason": "left to IREE: 1.01e+08 FLOP < min-flops 1.34e+08"

// -----

// Attention's P.V as IREE's StableHLO import writes it: B (the probabilities P)
// is a permuted copy of P. The kernel reads P itself, transposed (nt), through
// a collapse_shape view; V's copy moves its batch dimension, so A stays the copy.
// CHECK: hal.executable.source private @[[EXE3:falcon_gemm_f16_64x128x128_nt_of32_b4_[0-9a-f]+]]
// CHECK-LABEL: func.func @attention_pv
// CHECK: %[[VT:.+]] = linalg.generic
// CHECK: %[[A:.+]] = tensor.collapse_shape %[[VT]] {{\[}}[0, 1], [2], [3]]
// CHECK: %[[PV:.+]] = tensor.collapse_shape %arg1 {{\[}}[0, 1, 2], [3], [4]] : tensor<1x1x4x128x128xf16> into tensor<4x128x128xf16>
// CHECK: call @[[EXE3]]_call(%[[A]], %[[PV]]) : (tensor<4x64x128xf16>, tensor<4x128x128xf16>) -> tensor<4x64x128xf32>
func.func @attention_pv(%v: tensor<1x128x4x64xf16>, %p: tensor<1x1x4x128x128xf16>) -> tensor<4x64x128xf32> {
  %e1 = tensor.empty() : tensor<1x4x64x128xf16>
  %vt = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d3, d1, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%v : tensor<1x128x4x64xf16>) outs(%e1 : tensor<1x4x64x128xf16>) {
  ^bb0(%in: f16, %out: f16):
    linalg.yield %in : f16
  } -> tensor<1x4x64x128xf16>
  %e2 = tensor.empty() : tensor<1x4x128x1x128xf16>
  %pt = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d3, d0, d1, d4, d2)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%p : tensor<1x1x4x128x128xf16>) outs(%e2 : tensor<1x4x128x1x128xf16>) {
  ^bb0(%in: f16, %out: f16):
    linalg.yield %in : f16
  } -> tensor<1x4x128x1x128xf16>
  %a = tensor.collapse_shape %vt [[0, 1], [2], [3]] : tensor<1x4x64x128xf16> into tensor<4x64x128xf16>
  %b = tensor.collapse_shape %pt [[0, 1], [2], [3, 4]] : tensor<1x4x128x1x128xf16> into tensor<4x128x128xf16>
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x64x128xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<4x64x128xf32>) -> tensor<4x64x128xf32>
  %r = linalg.batch_matmul ins(%a, %b : tensor<4x64x128xf16>, tensor<4x128x128xf16>) outs(%z : tensor<4x64x128xf32>) -> tensor<4x64x128xf32>
  return %r : tensor<4x64x128xf32>
}
