// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen sums=f32 products=mixed" | FileCheck %s --check-prefix=MIXED
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen sums=f32 products=f32" | FileCheck %s --check-prefix=EXT
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen sums=f32" | FileCheck %s --check-prefix=MIXED
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen sums=f32 profile=%S/Inputs/f32_faster_profile.json" | FileCheck %s --check-prefix=EXT
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen sums=f32 products=f32" | FileCheck %s --check-prefix=EXTOPS
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen sums=input products=f32" | FileCheck %s --check-prefix=INPUT
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen sums=f32 products=f32" --lcma-explain -o /dev/null 2>&1 | FileCheck %s --check-prefix=EXPLAIN
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen sums=f32" --lcma-explain -o /dev/null 2>&1 | FileCheck %s --check-prefix=EXPLAINMIX

// The products' operand types of a plan on a bf16 result (bf16 x bf16 ->
// bf16) with f32 sums. Strassen's products M2 = (A21 + A22) B11,
// M3 = A11 (B12 - B22), M4 = A22 (B21 - B11) and M5 = (A11 + A12) B22 read
// one block alone. products=mixed (auto on the host profile, where IREE's
// bf16 GEMM is the faster one) passes that block as it is: the product is
// f32 x bf16 -> f32. products=f32 (auto on a profile whose f32 GEMM is
// faster) extends each such block to f32 once (one extf op per block) and
// every product is f32 x f32 -> f32. With sums=input every product is
// bf16 x bf16 -> f32 whatever products= says. Every product accumulates in
// f32 and C is rounded once.

// MIXED-LABEL: func.func @bf16_products
// MIXED: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x8xf32>, tensor<8x8xf32>) outs(%{{.+}} : tensor<8x8xf32>)
// MIXED: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x8xf32>, tensor<8x8xbf16>) outs(%{{.+}} : tensor<8x8xf32>)
// MIXED: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x8xbf16>, tensor<8x8xf32>) outs(%{{.+}} : tensor<8x8xf32>)
// MIXED: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x8xbf16>, tensor<8x8xf32>) outs(%{{.+}} : tensor<8x8xf32>)
// MIXED: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x8xf32>, tensor<8x8xbf16>) outs(%{{.+}} : tensor<8x8xf32>)
// MIXED: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x8xf32>, tensor<8x8xf32>) outs(%{{.+}} : tensor<8x8xf32>)
// MIXED: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x8xf32>, tensor<8x8xf32>) outs(%{{.+}} : tensor<8x8xf32>)
// MIXED-NOT: linalg.matmul
// MIXED: arith.truncf %{{.+}} : f32 to bf16
// MIXED: return

// EXT-LABEL: func.func @bf16_products
// EXT-NOT: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x8xbf16>
// EXT-NOT: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x8xf32>, tensor<8x8xbf16>
// EXT-COUNT-7: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x8xf32>, tensor<8x8xf32>) outs(%{{.+}} : tensor<8x8xf32>)
// EXT-NOT: linalg.matmul
// EXT: arith.truncf %{{.+}} : f32 to bf16
// EXT: return

// Each block read alone is extended once (B11, A11, A22, B22: four ops of one
// extf each, no add), before the product that first reads it.
// EXTOPS-LABEL: func.func @bf16_products
// EXTOPS: ^bb0(%[[X0:[^:,]+]]: bf16, %{{[^:,]+}}: f32):
// EXTOPS-NEXT: arith.extf %[[X0]] : bf16 to f32
// EXTOPS-NEXT: linalg.yield
// EXTOPS: ^bb0(%[[X1:[^:,]+]]: bf16, %{{[^:,]+}}: f32):
// EXTOPS-NEXT: arith.extf %[[X1]] : bf16 to f32
// EXTOPS-NEXT: linalg.yield
// EXTOPS: ^bb0(%[[X2:[^:,]+]]: bf16, %{{[^:,]+}}: f32):
// EXTOPS-NEXT: arith.extf %[[X2]] : bf16 to f32
// EXTOPS-NEXT: linalg.yield
// EXTOPS: ^bb0(%[[X3:[^:,]+]]: bf16, %{{[^:,]+}}: f32):
// EXTOPS-NEXT: arith.extf %[[X3]] : bf16 to f32
// EXTOPS-NEXT: linalg.yield
// EXTOPS-NOT: ^bb0(%{{[^:,]+}}: bf16, %{{[^:,]+}}: f32):
// EXTOPS: return

// INPUT-LABEL: func.func @bf16_products
// INPUT-COUNT-7: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x8xbf16>, tensor<8x8xbf16>) outs(%{{.+}} : tensor<8x8xf32>)
// INPUT-NOT: linalg.matmul
// INPUT: return

// EXPLAIN: rounding: sums in f32, products and combine C in f32, result rounded to bf16, once at the end; products multiply f32 x f32 (operands extended)
// EXPLAINMIX: rounding: sums in f32, products and combine C in f32, result rounded to bf16, once at the end; products multiply f32 x f32 where both are combined, f32 x bf16 (mixed) where one block is read alone
func.func @bf16_products(%a: tensor<16x16xbf16>, %b: tensor<16x16xbf16>, %c: tensor<16x16xbf16>) -> tensor<16x16xbf16> {
  %0 = linalg.matmul ins(%a, %b : tensor<16x16xbf16>, tensor<16x16xbf16>) outs(%c : tensor<16x16xbf16>) -> tensor<16x16xbf16>
  return %0 : tensor<16x16xbf16>
}
