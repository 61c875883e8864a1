// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=1" -o %t.once
// RUN: FileCheck %s --check-prefix=ONCE --input-file=%t.once
// RUN: falcon-opt %t.once --lcma-rewrite="scheme=strassen levels=1" -o %t.twice 2> %t.err
// RUN: diff %t.once %t.twice
// RUN: FileCheck %s --check-prefix=REMARK --input-file=%t.err
// RUN: falcon-opt %s --lcma-rewrite="scheme=strassen levels=1 form=kernel" | falcon-opt --lcma-rewrite="scheme=strassen levels=1" 2>&1 | FileCheck %s --check-prefix=KERNEL
// RUN: falcon-opt %s --lcma-rewrite="profile=x86-dev" | FileCheck %s --check-prefix=NONE
// RUN: falcon-opt %t.once --lcma-rewrite --lcma-explain -o %t.explained 2>&1 | FileCheck %s --check-prefix=EXPLAIN

// lcma-rewrite marks a module whose contractions it rewrote (falcon.lcma_rewritten) and leaves such a
// module as it is when run again: the 7 products of the first run are not taken for new contractions
// (Strassen again on each would be 49 products, a second level nobody asked for), and a remark on the
// module says why. A kernel-form plan handed off to falcon-kernels marks the module too; a run that
// rewrote nothing (auto keeps the small matmul classical) does not.

// ONCE: module attributes {falcon.lcma_rewritten}
// ONCE-LABEL: func.func @mm
// ONCE-COUNT-7: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<4x3xf32>, tensor<3x2xf32>)
// ONCE-NOT: linalg.matmul

// REMARK: remark: lcma-rewrite: the module was rewritten by lcma-rewrite before (falcon.lcma_rewritten): left as it is

// KERNEL: remark: lcma-rewrite: the module was rewritten by lcma-rewrite before
// KERNEL: module attributes {falcon.lcma_rewritten}
// KERNEL: linalg.matmul {falcon.plan = {{.*}}form = "kernel"

// EXPLAIN: lcma-explain: 0 of 0 contractions rewritten

// NONE-NOT: falcon.lcma_rewritten
// NONE: linalg.matmul ins(

func.func @mm(%a: tensor<8x6xf32>, %b: tensor<6x4xf32>, %c: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %r = linalg.matmul ins(%a, %b : tensor<8x6xf32>, tensor<6x4xf32>) outs(%c : tensor<8x4xf32>) -> tensor<8x4xf32>
  return %r : tensor<8x4xf32>
}
