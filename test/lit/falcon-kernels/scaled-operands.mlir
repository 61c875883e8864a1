// Scaled f16 operands of bf16 kernel-form plans (issue 16): the default (operands=auto) and operands=f16
// emit two absmax dispatches whose partial maxima feed combine A, combine B and combine C, with f16
// operands and products; operands=input (or a falcon.plan naming operands = "bf16") keeps bf16 operands
// and four dispatches. lcma-rewrite writes the operand type into the plan; falcon-kernels reads it.
// REQUIRES: triton
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=2 form=kernel" | FileCheck %s --check-prefix=PLAN
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=2 form=kernel" --falcon-kernels=min-flops=0 | FileCheck %s --check-prefix=SCALED
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=2 form=kernel operands=f16" --falcon-kernels=min-flops=0 | FileCheck %s --check-prefix=SCALED
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=2 form=kernel operands=input" | FileCheck %s --check-prefix=PLANIN
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=2 form=kernel operands=input" --falcon-kernels=min-flops=0 | FileCheck %s --check-prefix=INPUT
// RUN: sed 's/linalg.matmul ins/linalg.matmul {falcon.plan = {schemes = ["strassen", "strassen"], form = "kernel", operands = "bf16"}} ins/' %s > %t.pinned.mlir
// RUN: falcon-opt %t.pinned.mlir --lcma-rewrite --falcon-kernels=min-flops=0 --lcma-report=%t.json | FileCheck %s --check-prefix=INPUT
// RUN: FileCheck %s --check-prefix=REPORT --input-file=%t.json
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=2 form=kernel" --falcon-kernels=min-flops=0 --lcma-explain -o /dev/null 2>&1 | FileCheck %s --check-prefix=EXPLAIN

// PLAN: linalg.matmul {falcon.plan = {edge = "pad", form = "kernel", operands = "f16", schemes = ["strassen", "strassen"]}}
// PLANIN: linalg.matmul {falcon.plan = {edge = "pad", form = "kernel", operands = "bf16", schemes = ["strassen", "strassen"]}}

// SCALED: func.func private @falcon_plan_strassen_strassen_bf16_512x512x512_pf16_obf16_sf16_{{[0-9a-f]+}}(%[[A:.+]]: tensor<512x512xbf16>, %[[B:.+]]: tensor<512x512xbf16>) -> tensor<512x512xbf16>
// SCALED: %[[SA:.+]]:3 = flow.dispatch @{{.+}}_max_a_{{[0-9a-f]+}}::@falcon_absmax(%[[A]]) : (tensor<512x512xbf16>) -> (tensor<256xf32>,
// SCALED: %[[SB:.+]]:3 = flow.dispatch @{{.+}}_max_b_{{[0-9a-f]+}}::@falcon_absmax(%[[B]]) : (tensor<512x512xbf16>) -> (tensor<256xf32>,
// SCALED: %[[OA:.+]]:3 = flow.dispatch @{{.+}}::@falcon_combine_a(%[[A]], %[[SA]]#0) : (tensor<512x512xbf16>, tensor<256xf32>) -> (tensor<49x128x128xf16>,
// SCALED: %[[OB:.+]]:3 = flow.dispatch @{{.+}}::@falcon_combine_b(%[[B]], %[[SB]]#0) : (tensor<512x512xbf16>, tensor<256xf32>) -> (tensor<49x128x128xf16>,
// SCALED: %[[P:.+]]:3 = flow.dispatch @falcon_gemm_f16_128x128x128_nn_of16_b49_{{[0-9a-f]+}}::@falcon_gemm(%[[OA]]#0, %[[OB]]#0)
// SCALED: flow.dispatch @{{.+}}::@falcon_combine_c(%[[P]]#0, %[[SA]]#0, %[[SB]]#0) : (tensor<49x128x128xf16>, tensor<256xf32>, tensor<256xf32>) -> (tensor<512x512xbf16>,
// SCALED-LABEL: func.func @mm
// SCALED-NOT: linalg.matmul

// INPUT-NOT: falcon_absmax
// INPUT: func.func private @falcon_plan_strassen_strassen_bf16_512x512x512_pbf16_obf16_{{[0-9a-f]+}}(%[[A:.+]]: tensor<512x512xbf16>, %[[B:.+]]: tensor<512x512xbf16>)
// INPUT: flow.dispatch @{{.+}}::@falcon_combine_a(%[[A]]) : (tensor<512x512xbf16>) -> (tensor<49x128x128xbf16>,
// INPUT: flow.dispatch @{{.+}}::@falcon_combine_b(%[[B]]) : (tensor<512x512xbf16>) -> (tensor<49x128x128xbf16>,
// INPUT: flow.dispatch @falcon_gemm_bf16_128x128x128_nn_obf16_b49_{{[0-9a-f]+}}::@falcon_gemm
// INPUT: flow.dispatch @{{.+}}::@falcon_combine_c
// INPUT-NOT: falcon_absmax
// INPUT-LABEL: func.func @mm
// INPUT-NOT: linalg.matmul

// REPORT: "plan": {
// REPORT: "form": "kernel",
// REPORT-NEXT: "operands": "bf16"
// REPORT: "operands": {
// REPORT-NEXT: "type": "bf16",
// REPORT-NEXT: "scaled": false,
// REPORT-NEXT: "why": "falcon.plan names operands = bf16"
// REPORT: "operands": "bf16",

// EXPLAIN: kernels: plan strassen*strassen (R = 49, operands f16 (scaled), products in f16, {{.*}}) as 6 sm_90a dispatches
// EXPLAIN: operands: f16 scaled by powers of two (two absmax dispatches first); auto: the default for bf16 inputs
func.func @mm(%a: tensor<512x512xbf16>, %b: tensor<512x512xbf16>) -> tensor<512x512xbf16> {
  %cst = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<512x512xbf16>
  %f = linalg.fill ins(%cst : bf16) outs(%e : tensor<512x512xbf16>) -> tensor<512x512xbf16>
  %0 = linalg.matmul ins(%a, %b : tensor<512x512xbf16>, tensor<512x512xbf16>) outs(%f : tensor<512x512xbf16>) -> tensor<512x512xbf16>
  return %0 : tensor<512x512xbf16>
}
