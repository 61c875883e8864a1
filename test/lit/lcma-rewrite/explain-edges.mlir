// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen edge=peel" --lcma-report=%t.peel.json --lcma-explain -o /dev/null 2> %t.peel
// RUN: FileCheck %s --check-prefix=PEEL --input-file=%t.peel
// RUN: FileCheck %s --check-prefix=REPORT-PEEL --input-file=%t.peel.json
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen edge=pad" --lcma-report=%t.pad.json --lcma-explain -o /dev/null 2> %t.pad
// RUN: FileCheck %s --check-prefix=PAD --input-file=%t.pad
// RUN: FileCheck %s --check-prefix=REPORT-PAD --input-file=%t.pad.json

// --lcma-explain names the plan's edge policy (edge=peel|pad) only where the
// blocks do not divide the shape, and says what it does there and why: on a
// shape they divide the policy does nothing (it printed "peel edges" or "pad
// edges" there too, read as if something were padded). The report's plan
// keeps its machine-readable "edge" either way.

// PEEL: M=64 N=48 K=32 (f32 x f32 -> f32): rewritten: strassen, 1 level(s), per-product form; 7 products
// PEEL: M=63 N=47 K=32 (f32 x f32 -> f32): rewritten: strassen, 1 level(s), per-product form, M and N edges peeled (M=63 is not a multiple of 2; N=47 is not a multiple of 2); 9 products
// PAD: M=64 N=48 K=32 (f32 x f32 -> f32): rewritten: strassen, 1 level(s), per-product form; 7 products
// PAD: M=63 N=47 K=32 (f32 x f32 -> f32): rewritten: strassen, 1 level(s), per-product form, M and N edges padded (M=63 is not a multiple of 2; N=47 is not a multiple of 2); 7 products
// PAD-NOT: pad edges
// REPORT-PEEL-COUNT-2: "edge": "peel"
// REPORT-PAD-COUNT-2: "edge": "pad"

func.func @even(%a: tensor<64x32xf32>, %b: tensor<32x48xf32>, %c: tensor<64x48xf32>) -> tensor<64x48xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<64x32xf32>, tensor<32x48xf32>) outs(%c : tensor<64x48xf32>) -> tensor<64x48xf32>
  return %0 : tensor<64x48xf32>
}

func.func @odd(%a: tensor<63x32xf32>, %b: tensor<32x47xf32>, %c: tensor<63x47xf32>) -> tensor<63x47xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<63x32xf32>, tensor<32x47xf32>) outs(%c : tensor<63x47xf32>) -> tensor<63x47xf32>
  return %0 : tensor<63x47xf32>
}
