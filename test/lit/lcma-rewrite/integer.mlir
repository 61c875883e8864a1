// RUN: falcon-opt %s --split-input-file --lcma-rewrite="scheme=strassen" 2>&1 | FileCheck %s
// RUN: falcon-opt %s --split-input-file --lcma-rewrite="scheme=4x4x4:48" 2>&1 | FileCheck %s --check-prefix=RATIONAL

// i8 x i8 -> i32: integer-coefficient schemes combine in i32 (exact);
// a scheme with rational coefficients is refused with a remark and the
// contraction stays classical.

// CHECK-LABEL: func.func @int8
// CHECK: arith.extsi %{{.+}} : i8 to i32
// CHECK: arith.addi
// CHECK-COUNT-7: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<4x4x{{i8|i32}}>, tensor<4x4x{{i8|i32}}>) outs(%{{.+}} : tensor<4x4xi32>)

// RATIONAL: remark: lcma-rewrite: scheme 4x4x4:48 has non-integer coefficients and i32 is an integer type; kept classical
// RATIONAL-LABEL: func.func @int8
// RATIONAL: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<8x8xi8>, tensor<8x8xi8>) outs(%{{.+}} : tensor<8x8xi32>)
// RATIONAL-NOT: linalg.matmul
func.func @int8(%a: tensor<8x8xi8>, %b: tensor<8x8xi8>, %c: tensor<8x8xi32>) -> tensor<8x8xi32> {
  %0 = linalg.matmul ins(%a, %b : tensor<8x8xi8>, tensor<8x8xi8>) outs(%c : tensor<8x8xi32>) -> tensor<8x8xi32>
  return %0 : tensor<8x8xi32>
}
