// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=2" | FileCheck %s --check-prefix=AUTO
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=2 stack=true" | FileCheck %s --check-prefix=STACKED
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=2 stack=false" | FileCheck %s --check-prefix=RECURSIVE
// RUN: falcon-opt %s --lcma-rewrite="scheme=2x2x4:14 levels=2" | FileCheck %s --check-prefix=LONG
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=2 stack=true" --lcma-explain -o %t.mlir 2>&1 \
// RUN:   | FileCheck %s --check-prefix=COUNT

// How a per-product plan of several levels is emitted on a CPU profile
// (lcma-rewrite option stack=auto|true|false). Stacked: one batch_matmul over
// the R^2 products (compiles fast; its stacked operands, 91 MB here, are
// transients that glibc maps fresh on every call, which makes it slow on
// CPU). Recursive: R^2 matmuls on operands formed just before each (IREE
// compiles each as its own dispatch: about 16 s for strassen^2 predicted).
// auto takes recursion where it is predicted to compile in at most 20 s,
// within 15 s more than stacked for the whole module, and where the stacked
// operands take at least 32 MiB: here @first (strassen^2 on 256x2048x2048:
// 13.8 s more than stacked), not @second (would make 27.5 s), nor @small
// (7 MB stacked). A scheme whose recursion would compile long (2x2x4:14,
// 196 products: about 40 s) stays stacked.

// The explain line says what a stacked plan emitted: one batched contraction holding the 49 block
// products (it read "1 products").
// COUNT-COUNT-3: 2 level(s), per-product form; 1 contraction op (49 block products stacked in one), 6 combines emitted

// AUTO: func.func @first
// AUTO-COUNT-49: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<64x512xf32>, tensor<512x512xf32>)
// AUTO-NOT: linalg.batch_matmul
// AUTO: func.func @second
// AUTO-NOT: linalg.matmul
// AUTO: linalg.batch_matmul ins(%{{.+}}, %{{.+}} : tensor<49x64x512xf32>, tensor<49x512x512xf32>)
// AUTO-NOT: linalg.matmul
// AUTO: func.func @small
// AUTO-NOT: linalg.matmul
// AUTO: linalg.batch_matmul ins(%{{.+}}, %{{.+}} : tensor<49x64x128xf32>, tensor<49x128x128xf32>)
// AUTO-NOT: linalg.matmul

// STACKED: func.func @first
// STACKED-NOT: linalg.matmul
// STACKED: linalg.batch_matmul ins(%{{.+}}, %{{.+}} : tensor<49x64x512xf32>, tensor<49x512x512xf32>)
// STACKED: func.func @second
// STACKED-NOT: linalg.matmul
// STACKED: linalg.batch_matmul
// STACKED: func.func @small
// STACKED-NOT: linalg.matmul
// STACKED: linalg.batch_matmul

// Recursive: level 1 forms each combined operand of its 7 products (one
// combine op per operand that sums blocks), each product is cut again into
// 7 matmuls of the level-2 blocks; no batched product.
// RECURSIVE: func.func @first
// RECURSIVE-COUNT-49: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<64x512xf32>, tensor<512x512xf32>)
// RECURSIVE-NOT: linalg.batch_matmul
// RECURSIVE: func.func @second
// RECURSIVE-COUNT-49: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<64x512xf32>, tensor<512x512xf32>)
// RECURSIVE: func.func @small
// RECURSIVE-COUNT-49: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<64x128xf32>, tensor<128x128xf32>)
// RECURSIVE-NOT: linalg.batch_matmul

// LONG: func.func @first
// LONG-NOT: linalg.matmul
// LONG: linalg.batch_matmul ins(%{{.+}}, %{{.+}} : tensor<196x64x512xf32>, tensor<196x512x128xf32>)
// LONG-NOT: linalg.matmul

func.func @first(%a: tensor<256x2048xf32>, %b: tensor<2048x2048xf32>, %c: tensor<256x2048xf32>) -> tensor<256x2048xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<256x2048xf32>, tensor<2048x2048xf32>) outs(%c : tensor<256x2048xf32>) -> tensor<256x2048xf32>
  return %0 : tensor<256x2048xf32>
}
func.func @second(%a: tensor<256x2048xf32>, %b: tensor<2048x2048xf32>, %c: tensor<256x2048xf32>) -> tensor<256x2048xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<256x2048xf32>, tensor<2048x2048xf32>) outs(%c : tensor<256x2048xf32>) -> tensor<256x2048xf32>
  return %0 : tensor<256x2048xf32>
}
func.func @small(%a: tensor<256x512xf32>, %b: tensor<512x512xf32>, %c: tensor<256x512xf32>) -> tensor<256x512xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<256x512xf32>, tensor<512x512xf32>) outs(%c : tensor<256x512xf32>) -> tensor<256x512xf32>
  return %0 : tensor<256x512xf32>
}
