// RUN: falcon-opt %s --split-input-file --lcma-rewrite="scheme=strassen levels=2 max-error=1e-9" 2>&1 | FileCheck %s --check-prefix=BUDGET
// RUN: falcon-opt %s --split-input-file --lcma-rewrite="target=%S/Inputs/flat_profile.json levels=1 form=per-product" 2>&1 | FileCheck %s --check-prefix=AUTO
// RUN: falcon-opt %s --split-input-file --lcma-rewrite="scheme=strassen" 2>&1 | FileCheck %s --check-prefix=FORCED

// Error budgets and exactness. A forced plan over an explicit max-error stays
// classical with a remark; under auto the per-type default budget applies.
// An f16 result is not accumulated in f16 (plans accumulate in f32 and round
// once, budget 1.5x classical's error: narrow_result.mlir), so with the flat
// profile (every plan predicted faster) both K = 1024 and K = 4096 get a plan
// (under the old f16-accumulation model K = 4096 was over the budget);
// integer contractions are rewritten only when no intermediate can overflow.

// BUDGET: remark: lcma-rewrite: predicted error {{.*}} of strassen+strassen exceeds max-error 1.0e-09; kept classical
// BUDGET-LABEL: func.func @f32
// BUDGET-NEXT: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<64x64xf32>, tensor<64x64xf32>)
// BUDGET-NEXT: return
func.func @f32(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>, %c: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<64x64xf32>, tensor<64x64xf32>) outs(%c : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %0 : tensor<64x64xf32>
}

// -----

// AUTO-LABEL: func.func @f16_k1024
// AUTO-NOT: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<1024x1024xf16>, tensor<1024x1024xf16>)
// AUTO-COUNT-4: linalg.matmul
// AUTO: return
func.func @f16_k1024(%a: tensor<1024x1024xf16>, %b: tensor<1024x1024xf16>, %c: tensor<1024x1024xf16>) -> tensor<1024x1024xf16> {
  %0 = linalg.matmul ins(%a, %b : tensor<1024x1024xf16>, tensor<1024x1024xf16>) outs(%c : tensor<1024x1024xf16>) -> tensor<1024x1024xf16>
  return %0 : tensor<1024x1024xf16>
}

// -----

// AUTO-LABEL: func.func @f16_k4096
// AUTO-NOT: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<1024x4096xf16>, tensor<4096x1024xf16>)
// AUTO: linalg.matmul ins({{.+}} : tensor<{{.+}}xf16>, tensor<{{.+}}xf16>) outs({{.+}} : tensor<{{.+}}xf32>)
// AUTO: arith.truncf %{{.+}} : f32 to f16
// AUTO-NEXT: linalg.yield
// AUTO: return
func.func @f16_k4096(%a: tensor<1024x4096xf16>, %b: tensor<4096x1024xf16>, %c: tensor<1024x1024xf16>) -> tensor<1024x1024xf16> {
  %0 = linalg.matmul ins(%a, %b : tensor<1024x4096xf16>, tensor<4096x1024xf16>) outs(%c : tensor<1024x1024xf16>) -> tensor<1024x1024xf16>
  return %0 : tensor<1024x1024xf16>
}

// -----

// FORCED: remark: lcma-rewrite: worst-case magnitude {{.*}} exceeds i32 {{.*}}; kept classical
// FORCED-LABEL: func.func @i32
// FORCED-NEXT: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x8xi32>, tensor<8x8xi32>)
// FORCED-NEXT: return
func.func @i32(%a: tensor<8x8xi32>, %b: tensor<8x8xi32>, %c: tensor<8x8xi32>) -> tensor<8x8xi32> {
  %0 = linalg.matmul ins(%a, %b : tensor<8x8xi32>, tensor<8x8xi32>) outs(%c : tensor<8x8xi32>) -> tensor<8x8xi32>
  return %0 : tensor<8x8xi32>
}
