// falcon-kernels arch=x86-avx512 on a kernel-form Strassen plan whose products are 512 rows with a large
// block of B (4096 x 2048 of 4096 x 8192): one dispatch per product that sums and packs its B inside the
// GEMM (lcma_fgemm), no pack dispatch; the report counts R dispatches. Where the host's cores would not
// share the product's panels out evenly the products take two dispatches (cpu_gemm.plan_b_inside):
// lit.cfg.py's plan-b-inside feature says whether they do here. (Named CPU: runs on any x86-64 machine
// with a C compiler; the kernel is not run here, test_cpu_plan.py runs it.)
// REQUIRES: cpu-kernel-cc, plan-b-inside
// RUN: falcon-opt %s --falcon-kernels="x86-avx512 cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=znver4" | FileCheck %s
// RUN: falcon-opt %s --falcon-kernels="x86-avx512 cpu-flags=--iree-hal-target-device=local,--iree-hal-local-target-device-backends=llvm-cpu,--iree-llvmcpu-target-cpu=znver4" --lcma-report=%t.json -o /dev/null
// RUN: FileCheck %s --check-prefix=REPORT --input-file=%t.json

// CHECK: func.func private @[[CALLI:falcon_cpu_sgemm_14x32_k256_112x(256|512)_p16_[0-9a-f]{8}_strassen_1024x8192x4096_call]](%[[A:.+]]: tensor<1024x4096xf32>, %[[B:.+]]: tensor<4096x8192xf32>) -> tensor<1024x8192xf32>
// CHECK: %[[C0:.+]] = tensor.empty() : tensor<1024x8192xf32>
// CHECK: %[[G0:.+]]:2 = flow.dispatch @[[EXE:falcon_cpu_sgemm_14x32_k256_112x(256|512)_p16_[0-9a-f]{8}]]::@[[EXE]]_lcma_fgemm[%{{.+}}](%[[A]], %[[B]], %[[C0]], %{{.+}}) : (tensor<1024x4096xf32>, tensor<4096x8192xf32>, tensor<1024x8192xf32>, {{(index, )+}}index) -> (%[[C0]], tensor<{{[0-9]+}}xf32>)
// CHECK: %[[G1:.+]]:2 = flow.dispatch @[[EXE]]::@[[EXE]]_lcma_fgemm[%{{.+}}](%[[A]], %[[B]], %[[G0]]#0, %{{.+}}) : ({{.+}}) -> (%[[G0]]#0, tensor<{{[0-9]+}}xf32>)
// CHECK-COUNT-5: flow.dispatch @[[EXE]]::@[[EXE]]_lcma_fgemm[
// CHECK-NOT: flow.dispatch
// CHECK: return %{{.+}}#0 : tensor<1024x8192xf32>
// CHECK: stream.executable.export public @[[EXE]]_lcma_fgemm workgroups
// CHECK: func.func private @falcon_cpu_lcma_fgemm_14x32_k256_112x{{256|512}}_p16({{.+}}) attributes {hal.import.static}
// CHECK-LABEL: func.func @b_inside
// CHECK: call @[[CALLI]](%arg0, %arg1)
func.func @b_inside(%a: tensor<1024x4096xf32>, %b: tensor<4096x8192xf32>) -> tensor<1024x8192xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1024x8192xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<1024x8192xf32>) -> tensor<1024x8192xf32>
  %0 = linalg.matmul {falcon.plan = {schemes = ["strassen"], form = "kernel"}} ins(%a, %b : tensor<1024x4096xf32>, tensor<4096x8192xf32>) outs(%f : tensor<1024x8192xf32>) -> tensor<1024x8192xf32>
  return %0 : tensor<1024x8192xf32>
}

// REPORT: "kernel": "plan"
// REPORT: "reason": "kernel-form plan on falcon's CPU kernel (combines inside it)"
// REPORT: "plan": {
// REPORT: "scheme": "strassen"
// REPORT: "R": 7
// REPORT: "dispatches": 7
// REPORT: "blocks": [
// REPORT-NEXT: 512,
// REPORT-NEXT: 4096,
// REPORT-NEXT: 2048
