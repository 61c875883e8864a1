// falcon-kernels arch=x86-avx512 on a contraction carrying a kernel-form falcon.plan: the plan runs
// on falcon's CPU kernel as 2R dispatches (per product: the pack of B with combine B inside it, then
// the GEMM with combine A in its pack of A and combine C in its epilogue), C threaded through the
// products in place; no combine op of IREE's. A plan whose format does not divide the sizes runs on
// the classical kernel and the report says why. (Named CPU: runs on any x86-64 machine with a C
// compiler; the kernel is not run here, test_falcon_kernels_cpu.py runs it.)
// REQUIRES: cpu-kernel-cc
// RUN: falcon-opt %s --split-input-file --falcon-kernels="x86-avx512 cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=znver4" | FileCheck %s
// RUN: falcon-opt %s --split-input-file --falcon-kernels="x86-avx512 cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=znver4" --lcma-report=%t.json -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT --input-file=%t.json

// CHECK: func.func private @[[CALL:falcon_cpu_sgemm_14x32_k256_28x256_p16_[0-9a-f]{8}_strassen_512x256x768_call]](%[[A:.+]]: tensor<512x768xf32>, %[[B:.+]]: tensor<768x256xf32>) -> tensor<512x256xf32>
// CHECK: %[[C0:.+]] = tensor.empty() : tensor<512x256xf32>
// CHECK: %[[BP0:.+]] = flow.dispatch @[[EXE:falcon_cpu_sgemm_14x32_k256_28x256_p16_[0-9a-f]{8}]]::@[[EXE]]_lcma_pack_b[%{{.+}}](%[[B]], %{{.+}}) : (tensor<768x256xf32>, {{(index, )+}}index) -> tensor<{{[0-9]+}}xf32>
// CHECK: %[[G0:.+]]:2 = flow.dispatch @[[EXE]]::@[[EXE]]_lcma_gemm[%{{.+}}, %{{.+}}](%[[A]], %[[BP0]], %[[C0]], %{{.+}}) : (tensor<512x768xf32>, tensor<{{[0-9]+}}xf32>, tensor<512x256xf32>, {{.+}}) -> (%[[C0]], tensor<{{[0-9]+}}xf32>)
// CHECK: %[[BP1:.+]] = flow.dispatch @[[EXE]]::@[[EXE]]_lcma_pack_b
// CHECK: %[[G1:.+]]:2 = flow.dispatch @[[EXE]]::@[[EXE]]_lcma_gemm[%{{.+}}, %{{.+}}](%[[A]], %[[BP1]], %[[G0]]#0, %{{.+}}) : ({{.+}}) -> (%[[G0]]#0, tensor<{{[0-9]+}}xf32>)
// CHECK-COUNT-5: flow.dispatch @[[EXE]]::@[[EXE]]_lcma_gemm
// CHECK-NOT: flow.dispatch
// CHECK: return %{{.+}}#0 : tensor<512x256xf32>
// CHECK: stream.executable.export public @[[EXE]]_lcma_pack_b workgroups
// CHECK: stream.executable.export public @[[EXE]]_lcma_gemm workgroups
// CHECK: func.func private @falcon_cpu_lcma_pack_b_14x32_k256_28x256_p16({{.+}}) attributes {hal.import.static}
// CHECK: func.func private @falcon_cpu_lcma_gemm_14x32_k256_28x256_p16({{.+}}) attributes {hal.import.static}
// CHECK-LABEL: func.func @strassen
// CHECK-NOT: linalg.matmul
// CHECK: call @[[CALL]](%arg0, %arg1)
func.func @strassen(%a: tensor<512x768xf32>, %b: tensor<768x256xf32>) -> tensor<512x256xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<512x256xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<512x256xf32>) -> tensor<512x256xf32>
  %0 = linalg.matmul {falcon.plan = {schemes = ["strassen"], form = "kernel"}} ins(%a, %b : tensor<512x768xf32>, tensor<768x256xf32>) outs(%f : tensor<512x256xf32>) -> tensor<512x256xf32>
  return %0 : tensor<512x256xf32>
}

// -----

// 510 rows do not split into Strassen^2's 4 blocks: the classical kernel.
// CHECK-LABEL: func.func @not_divisible
// CHECK-NOT: falcon.plan
// CHECK: call @falcon_cpu_sgemm_{{.+}}_510x256x768_call
func.func @not_divisible(%a: tensor<510x768xf32>, %b: tensor<768x256xf32>) -> tensor<510x256xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<510x256xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<510x256xf32>) -> tensor<510x256xf32>
  %0 = linalg.matmul {falcon.plan = {schemes = ["strassen", "strassen"], form = "kernel"}} ins(%a, %b : tensor<510x768xf32>, tensor<768x256xf32>) outs(%f : tensor<510x256xf32>) -> tensor<510x256xf32>
  return %0 : tensor<510x256xf32>
}

// -----

// Scheme names that are no MLIR identifiers: the catalog's name of Winograd's scheme (a '-') and a
// composition written with spaces. The wrapper's symbol keeps letters, digits and '_' (were: a '-' or
// a space in it, and falcon-kernels failed with an internal error, nothing written).
// CHECK-DAG: func.func private @[[W:falcon_cpu_sgemm_14x32_k256_28x256_p16_[0-9a-f]{8}_2x2x2_7_winograd_64x128x96_call]](
// CHECK-DAG: func.func private @[[S:falcon_cpu_sgemm_14x32_k256_28x256_p16_[0-9a-f]{8}_strassen_2x2x2_8_64x128x96_call]](
// CHECK-LABEL: func.func @names
// CHECK: call @[[W]](%arg0, %arg1)
// CHECK: call @[[S]](%arg0, %arg1)
func.func @names(%a: tensor<64x96xf32>, %b: tensor<96x128xf32>) -> (tensor<64x128xf32>, tensor<64x128xf32>) {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x128xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<64x128xf32>) -> tensor<64x128xf32>
  %0 = linalg.matmul {falcon.plan = {schemes = ["2x2x2:7-winograd"], form = "kernel"}} ins(%a, %b : tensor<64x96xf32>, tensor<96x128xf32>) outs(%f : tensor<64x128xf32>) -> tensor<64x128xf32>
  %1 = linalg.matmul {falcon.plan = {schemes = ["strassen * 2x2x2:8"], form = "kernel"}} ins(%a, %b : tensor<64x96xf32>, tensor<96x128xf32>) outs(%f : tensor<64x128xf32>) -> tensor<64x128xf32>
  return %0, %1 : tensor<64x128xf32>, tensor<64x128xf32>
}

// -----

// A plan on a batch with B stored N x K (attention's Q K^T): the same 2R dispatches, each running the
// 4 entries (the pack's workgroup y, the GEMM's z), B's blocks found in its stored N x K layout.
// CHECK: func.func private @[[QKT:falcon_cpu_sgemm_14x32_k256_28x256_p16_[0-9a-f]{8}_strassen_64x128x96_b4_tb_call]](%[[A:.+]]: tensor<4x64x96xf32>, %[[B:.+]]: tensor<4x128x96xf32>) -> tensor<4x64x128xf32>
// CHECK-DAG: %[[TB:.+]] = arith.constant 1 : index
// CHECK-DAG: %[[N4:.+]] = arith.constant 4 : index
// CHECK: flow.dispatch @[[EXE:falcon_cpu_sgemm_14x32_k256_28x256_p16_[0-9a-f]{8}]]::@[[EXE]]_lcma_pack_b[%{{.+}}, %[[N4]]](%[[B]], %{{.+}}, %{{.+}}, %{{.+}}, %[[TB]], %{{.+}}) : (tensor<4x128x96xf32>, {{(index, )+}}index) -> tensor<{{[0-9]+}}xf32>
// CHECK: flow.dispatch @[[EXE]]::@[[EXE]]_lcma_gemm[%{{.+}}, %{{.+}}, %{{.+}}](%[[A]], %{{.+}}) : (tensor<4x64x96xf32>, tensor<{{[0-9]+}}xf32>, tensor<4x64x128xf32>, {{.+}}) -> (%{{.+}}, tensor<{{[0-9]+}}xf32>)
// CHECK-COUNT-6: flow.dispatch @[[EXE]]::@[[EXE]]_lcma_pack_b[%{{.+}}, %[[N4]]](%[[B]],
// CHECK: flow.dispatch @[[EXE]]::@[[EXE]]_lcma_gemm
// CHECK-NOT: flow.dispatch
// CHECK-LABEL: func.func @qkt
// CHECK-NOT: linalg.generic
// CHECK: call @[[QKT]](%arg0, %arg1)
func.func @qkt(%a: tensor<4x64x96xf32>, %b: tensor<4x128x96xf32>) -> tensor<4x64x128xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x64x128xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<4x64x128xf32>) -> tensor<4x64x128xf32>
  %0 = linalg.generic {indexing_maps = [affine_map<(b, m, n, k) -> (b, m, k)>, affine_map<(b, m, n, k) -> (b, n, k)>, affine_map<(b, m, n, k) -> (b, m, n)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"], falcon.plan = {schemes = ["strassen"], form = "kernel"}} ins(%a, %b : tensor<4x64x96xf32>, tensor<4x128x96xf32>) outs(%f : tensor<4x64x128xf32>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %z, %p : f32
    linalg.yield %s : f32
  } -> tensor<4x64x128xf32>
  return %0 : tensor<4x64x128xf32>
}

// REPORT: "kernel": "plan"
// REPORT: "reason": "kernel-form plan on falcon's CPU kernel (combines inside it)"
// REPORT: "plan": {
// REPORT: "scheme": "strassen"
// REPORT: "R": 7
// REPORT: "dispatches": 14
// REPORT: "kernel": "classical"
// REPORT: "reason": "kernel-form plan strassen*strassen does not run on falcon's CPU kernel (CpuPlan: 510x256x768 (MxNxK) is not a multiple of strassen*strassen's format <4,4,4>); classical kernel"
// REPORT: "kernel": "plan"
// REPORT: "layout": "B stored N x K, batch 4"
