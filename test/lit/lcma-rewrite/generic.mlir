// RUN: falcon-opt %s --lcma-rewrite="scheme=3x3x3:23" | FileCheck %s

// A linalg.generic contraction (i8 x i8 -> i32 style casts in its body, here
// f16 -> f32) is recognised through linalg's contraction interface; its
// products are re-emitted as linalg.generic contractions in the accumulator type.

// CHECK-LABEL: func.func @gen
// CHECK-COUNT-23: iterator_types = ["parallel", "parallel", "reduction"]}{{.*}}outs(%{{.+}} : tensor<2x3xf32>)
// CHECK-NOT: "reduction"
#mA = affine_map<(m, n, k) -> (m, k)>
#mB = affine_map<(m, n, k) -> (k, n)>
#mC = affine_map<(m, n, k) -> (m, n)>
func.func @gen(%a: tensor<6x9xf16>, %b: tensor<9x9xf16>, %c: tensor<6x9xf32>) -> tensor<6x9xf32> {
  %0 = linalg.generic {indexing_maps = [#mA, #mB, #mC], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : tensor<6x9xf16>, tensor<9x9xf16>) outs(%c : tensor<6x9xf32>) {
  ^bb0(%x: f16, %y: f16, %o: f32):
    %xe = arith.extf %x : f16 to f32
    %ye = arith.extf %y : f16 to f32
    %p = arith.mulf %xe, %ye : f32
    %s = arith.addf %o, %p : f32
    linalg.yield %s : f32
  } -> tensor<6x9xf32>
  return %0 : tensor<6x9xf32>
}
