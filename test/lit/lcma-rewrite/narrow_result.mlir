// RUN: falcon-opt %s --split-input-file --lcma-rewrite="scheme=strassen sums=f32" | FileCheck %s --check-prefix=F32
// RUN: falcon-opt %s --split-input-file --lcma-rewrite="scheme=strassen sums=input" | FileCheck %s --check-prefix=INPUT
// RUN: falcon-opt %s --split-input-file --lcma-rewrite="scheme=strassen form=grouped" | FileCheck %s --check-prefix=GROUPED
// RUN: falcon-opt %s --split-input-file --lcma-rewrite="scheme=strassen sums=input max-error=5e-3" 2>&1 | FileCheck %s --check-prefix=BUDGET
// RUN: falcon-opt %s --split-input-file --lcma-rewrite="scheme=strassen form=grouped sums=input" | FileCheck %s --check-prefix=GROUPEDIN

// A bf16 or f16 result (bf16 x bf16 -> bf16, as JAX exports a bf16 model's
// projections) is not accumulated in its own type: every product
// accumulates in f32 (linalg.matmul with an f32 init), combine C runs in
// f32, the peeled K strip too, and C is rounded exactly once at the end
// (truncf(extf(C0) + P)). The combined operands are f32 (sums=f32) or
// rounded once to the input type (sums=input); over max-error a forced
// plan with bf16 sums stays classical (predicted 1u + 2.45 x 0.45u = 8.2e-3).

// F32-LABEL: func.func @bf16_odd_k
// F32-NOT: arith.truncf
// F32: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x1xbf16>, tensor<1x8xbf16>) outs(%{{.+}} : tensor<8x8xf32>)
// F32-NOT: arith.truncf
// F32-COUNT-7: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<4x4x{{(b?f16|f32)}}>, tensor<4x4x{{(b?f16|f32)}}>) outs(%{{.+}} : tensor<4x4xf32>)
// F32-NOT: arith.truncf
// F32: ^bb0(%[[P:.+]]: f32, %[[C0:.+]]: bf16):
// F32-NEXT: %[[E:.+]] = arith.extf %[[C0]] : bf16 to f32
// F32-NEXT: %[[S:.+]] = arith.addf %[[E]], %[[P]] : f32
// F32-NEXT: %[[T:.+]] = arith.truncf %[[S]] : f32 to bf16
// F32-NEXT: linalg.yield %[[T]] : bf16
// F32-NEXT: } -> tensor<8x8xbf16>
// F32-NOT: arith.truncf
// F32: return

// INPUT-LABEL: func.func @bf16_odd_k
// INPUT: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x1xbf16>, tensor<1x8xbf16>) outs(%{{.+}} : tensor<8x8xf32>)
// INPUT: ^bb0(%{{.+}}: bf16, %{{.+}}: bf16, %{{.+}}: bf16):
// INPUT: arith.addf %{{.+}}, %{{.+}} : f32
// INPUT-NEXT: arith.truncf %{{.+}} : f32 to bf16
// INPUT-COUNT-7: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<4x4xbf16>, tensor<4x4xbf16>) outs(%{{.+}} : tensor<4x4xf32>)
// INPUT-NOT: arith.truncf
// INPUT: ^bb0(%{{.+}}: f32, %{{.+}}: bf16):
// INPUT: arith.truncf %{{.+}} : f32 to bf16
// INPUT-NOT: arith.truncf
// INPUT: return

// BUDGET: remark: lcma-rewrite: predicted error {{[0-9.]+e-03}} of strassen exceeds max-error 5.0e-03; kept classical
func.func @bf16_odd_k(%a: tensor<8x9xbf16>, %b: tensor<9x8xbf16>, %c: tensor<8x8xbf16>) -> tensor<8x8xbf16> {
  %0 = linalg.matmul ins(%a, %b : tensor<8x9xbf16>, tensor<9x8xbf16>) outs(%c : tensor<8x8xbf16>) -> tensor<8x8xbf16>
  return %0 : tensor<8x8xbf16>
}

// -----

// GROUPED-LABEL: func.func @f16_grouped
// GROUPED-NOT: arith.truncf
// GROUPED: linalg.batch_matmul ins(%{{.+}}, %{{.+}} : tensor<7x4x4xf32>, tensor<7x4x4xf32>) outs(%{{.+}} : tensor<7x4x4xf32>)
// GROUPED-NOT: arith.truncf
// GROUPED: ^bb0(%{{.+}}: f32, %{{.+}}: f16):
// GROUPED: arith.truncf %{{.+}} : f32 to f16
// GROUPED-NOT: arith.truncf
// GROUPED: return
// GROUPEDIN-LABEL: func.func @f16_grouped
// GROUPEDIN: arith.truncf %{{.+}} : f32 to f16
// GROUPEDIN-NEXT: linalg.yield
// GROUPEDIN: linalg.batch_matmul ins(%{{.+}}, %{{.+}} : tensor<7x4x4xf16>, tensor<7x4x4xf16>) outs(%{{.+}} : tensor<7x4x4xf32>)
// GROUPEDIN-NOT: arith.truncf
// GROUPEDIN: ^bb0(%{{.+}}: f32, %{{.+}}: f16):
// GROUPEDIN: arith.truncf %{{.+}} : f32 to f16
// GROUPEDIN-NOT: arith.truncf
// GROUPEDIN: return
func.func @f16_grouped(%a: tensor<8x8xf16>, %b: tensor<8x8xf16>, %c: tensor<8x8xf16>) -> tensor<8x8xf16> {
  %0 = linalg.matmul ins(%a, %b : tensor<8x8xf16>, tensor<8x8xf16>) outs(%c : tensor<8x8xf16>) -> tensor<8x8xf16>
  return %0 : tensor<8x8xf16>
}
