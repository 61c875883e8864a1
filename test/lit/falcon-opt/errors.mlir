// RUN: not falcon-opt %s --lcma-rewrite="scheme=nosuch" 2>&1 | FileCheck %s --check-prefix=SCHEME
// RUN: not falcon-opt %s --lcma-rewrite="levels=-1" 2>&1 | FileCheck %s --check-prefix=LEVELS
// RUN: not falcon-opt %s --lcma-rewrite="levels=abc" 2>&1 | FileCheck %s --check-prefix=LEVELSABC
// RUN: not falcon-opt %s --lcma-rewrite="bogus=1" 2>&1 | FileCheck %s --check-prefix=KEY
// RUN: not falcon-opt %s --no-such-pass 2>&1 | FileCheck %s --check-prefix=PASS
// RUN: not falcon-opt %s.missing 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not falcon-opt %s --split-input-file 2>&1 | FileCheck %s --check-prefix=SYNTAX
// RUN: not falcon-opt %s --split-input-file --lcma-rewrite -o %t.out 2>&1 ; not test -e %t.out

// SCHEME: falcon-opt: error: unknown scheme 'nosuch' (run `falcon-catalog list` for the valid names)
// LEVELS: falcon-opt: error: lcma-rewrite option levels=-1 is out of range (expected auto or 1..4)
// LEVELSABC: falcon-opt: error: lcma-rewrite option levels='abc' is not an integer
// KEY: falcon-opt: error: unknown lcma-rewrite option 'bogus'
// PASS: falcon-opt: error: unknown pass or option '--no-such-pass'
// MISSING: falcon-opt: error: cannot read '{{.*}}errors.mlir.missing'
// SYNTAX: errors.mlir:24:29: error: expected
// SYNTAX-NOT: Traceback
func.func @ok(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  return %a : tensor<4x4xf32>
}

// -----
func.func @broken(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  return %a : tensor<4x4xf32
}
