// RUN: falcon-opt %s --lcma-rewrite="profile=x86-falcon scheme=strassen form=kernel edge=peel" -o %t.peel 2> %t.err
// RUN: FileCheck %s --input-file=%t.err
// RUN: FileCheck %s --check-prefix=PLAN --input-file=%t.peel
// RUN: falcon-opt %s --lcma-rewrite="profile=x86-falcon scheme=strassen form=kernel edge=pad" -o %t.pad 2>&1 | FileCheck %s --check-prefix=QUIET --allow-empty

// The kernel form pads (its only edge policy). Asked for edge=peel on a shape the blocks do not divide
// (M = 1001), the plan attached is padded, and one warning line on the op says the option was not
// followed there; on a shape they divide (@even) the policy does nothing and nothing is said; asked for
// edge=pad nothing is said either.

// CHECK: edge-changed.mlir:[[# @LINE + 8]]:8: warning: lcma-rewrite: edge=peel asked for, plan strassen in the kernel form: M edge padded
// CHECK-NOT: warning

// PLAN: falcon.plan = {edge = "pad", form = "kernel"

// QUIET-NOT: warning

func.func @odd(%a: tensor<1001x1024xf32>, %b: tensor<1024x1024xf32>, %c: tensor<1001x1024xf32>) -> tensor<1001x1024xf32> {
  %r = linalg.matmul ins(%a, %b : tensor<1001x1024xf32>, tensor<1024x1024xf32>) outs(%c : tensor<1001x1024xf32>) -> tensor<1001x1024xf32>
  return %r : tensor<1001x1024xf32>
}

func.func @even(%a: tensor<1000x1024xf32>, %b: tensor<1024x1024xf32>, %c: tensor<1000x1024xf32>) -> tensor<1000x1024xf32> {
  %r = linalg.matmul ins(%a, %b : tensor<1000x1024xf32>, tensor<1024x1024xf32>) outs(%c : tensor<1000x1024xf32>) -> tensor<1000x1024xf32>
  return %r : tensor<1000x1024xf32>
}
