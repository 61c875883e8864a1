// RUN: falcon-opt %s --split-input-file --falcon-tiles=target=cuda-sm80 | FileCheck %s
// RUN: falcon-opt %s --split-input-file --lcma-rewrite="scheme=strassen form=grouped sums=input" --falcon-tiles=target=cuda-sm80 | FileCheck %s --check-prefix=GROUPED
// RUN: falcon-opt %s --split-input-file --pass-pipeline="builtin.module(lcma-rewrite{scheme=strassen levels=2 form=grouped},falcon-tiles{target=cuda-sm80})" | FileCheck %s --check-prefix=GROUPED2
// RUN: falcon-opt %s --split-input-file --falcon-tiles=target=none | FileCheck %s --check-prefix=NONE
// RUN: not falcon-opt %s --falcon-tiles=target=sm_90 2>&1 | FileCheck %s --check-prefix=BAD

// falcon-tiles attaches IREE compilation_info (TileAndFuse) to contractions:
// the first choice of the cuda-sm80 table that divides M, N and K.

// NONE-NOT: promote_operands
// BAD: falcon-tiles option target='sm_90' is invalid

// f32 SIMT, 256x256x256: workgroup 128x128, thread 8x8, K step 16, 256 threads.
// (The printer hoists the attributes into aliases above the module.)
// CHECK: #[[TR:[a-z0-9_]+]] = #iree_codegen.translation_info<pipeline = #iree_gpu.pipeline<TileAndFuse> workgroup_size = [256, 1, 1] subgroup_size = 32>
// CHECK: #[[CI:[a-z0-9_]+]] = #iree_codegen.compilation_info<lowering_config = #iree_gpu.lowering_config<{promote_operands = [0, 1], reduction = [0, 0, 16], thread = [8, 8, 0], workgroup = [128, 128, 0]}>, translation_info = #[[TR]]>
// CHECK: func.func @f32
// CHECK: linalg.matmul {compilation_info = #[[CI]]} ins
// The grouped form's one batched product (7 x 128x128x128) gets the batch tile 1
// and, being batched, the K step 32.
// GROUPED: #[[CI:[a-z0-9_]+]] = #iree_codegen.compilation_info<lowering_config = #iree_gpu.lowering_config<{promote_operands = [0, 1], reduction = [0, 0, 0, 32], thread = [1, 8, 8, 0], workgroup = [1, 128, 128, 0]}>
// GROUPED: func.func @f32
// GROUPED: linalg.batch_matmul {compilation_info = #[[CI]]} ins({{.+}} : tensor<7x128x128xf32>, tensor<7x128x128xf32>)
// GROUPED-NOT: linalg.matmul
// Two grouped levels: 49 products of 64x64x64, the 64x64 choice.
// GROUPED2: #[[CI:[a-z0-9_]+]] = #iree_codegen.compilation_info<lowering_config = #iree_gpu.lowering_config<{promote_operands = [0, 1], reduction = [0, 0, 0, 16], thread = [1, 4, 4, 0], workgroup = [1, 64, 64, 0]}>
// GROUPED2: func.func @f32
// GROUPED2: linalg.batch_matmul {compilation_info = #[[CI]]} ins({{.+}} : tensor<49x64x64xf32>, tensor<49x64x64xf32>)
func.func @f32(%a: tensor<256x256xf32>, %b: tensor<256x256xf32>, %c: tensor<256x256xf32>) -> tensor<256x256xf32> {
  %0 = linalg.matmul ins(%a, %b : tensor<256x256xf32>, tensor<256x256xf32>) outs(%c : tensor<256x256xf32>) -> tensor<256x256xf32>
  return %0 : tensor<256x256xf32>
}

// -----

// f16 with the mma.sync 16x8x16 intrinsic: workgroup 128x256, 4x8 intrinsic
// tiles per warp (8 warps), 4 intrinsics of K per step.
// CHECK: #[[TR:[a-z0-9_]+]] = #iree_codegen.translation_info<pipeline = #iree_gpu.pipeline<TileAndFuse> workgroup_size = [256, 1, 1] subgroup_size = 32, {gpu_pipeline_options = #iree_gpu.pipeline_options<prefetch_num_stages = 2
// CHECK: #[[CI:[a-z0-9_]+]] = #iree_codegen.compilation_info<lowering_config = #iree_gpu.lowering_config<{convert_acc_gemm, mma_kind = #iree_gpu.mma_layout<NV_MMA_SYNC_F16_16x8x16_F16>, promote_operands = [0, 1], reduction = [0, 0, 4], subgroup = [4, 8, 0], workgroup = [128, 256, 0]}>, translation_info = #[[TR]]>
// CHECK: func.func @f16
// CHECK: linalg.matmul {compilation_info = #[[CI]]} ins
// Grouped f16 -> f16 with sums=input: the combined operands rounded to f16,
// the batched product f16 x f16 accumulating in f32 (an f16 result's plan
// never accumulates in f16), so the f32-accumulator mma intrinsic.
// GROUPED: #[[CI:[a-z0-9_]+]] = #iree_codegen.compilation_info<lowering_config = #iree_gpu.lowering_config<{convert_acc_gemm, mma_kind = #iree_gpu.mma_layout<NV_MMA_SYNC_F32_16x8x16_F16>, promote_operands = [0, 1], reduction = [0, 0, 0, 4], subgroup = [0, 4, 4, 0], workgroup = [1, 128, 128, 0]}>
// GROUPED: func.func @f16
// GROUPED: linalg.batch_matmul {compilation_info = #[[CI]]} ins({{.+}} : tensor<7x128x128xf16>, tensor<7x128x128xf16>) outs({{.+}} : tensor<7x128x128xf32>)
func.func @f16(%a: tensor<256x256xf16>, %b: tensor<256x256xf16>, %c: tensor<256x256xf16>) -> tensor<256x256xf16> {
  %0 = linalg.matmul ins(%a, %b : tensor<256x256xf16>, tensor<256x256xf16>) outs(%c : tensor<256x256xf16>) -> tensor<256x256xf16>
  return %0 : tensor<256x256xf16>
}

// -----

// Transposed B (x @ W.T), bf16 x bf16 -> f32: the loop dims, not the layout, place the tiles.
// CHECK: #[[CI:[a-z0-9_]+]] = #iree_codegen.compilation_info<{{.*}}NV_MMA_SYNC_F32_16x8x16_BF16{{.*}}workgroup = [64, 64, 0]
// CHECK: func.func @bf16_transposed_b
// CHECK: linalg.matmul indexing_maps = [{{.+}}] {compilation_info = #[[CI]]} ins
func.func @bf16_transposed_b(%a: tensor<64x128xbf16>, %b: tensor<192x128xbf16>, %c: tensor<64x192xf32>) -> tensor<64x192xf32> {
  %0 = linalg.matmul indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>]
         ins(%a, %b : tensor<64x128xbf16>, tensor<192x128xbf16>) outs(%c : tensor<64x192xf32>) -> tensor<64x192xf32>
  return %0 : tensor<64x192xf32>
}

// -----

// A generic contraction with its loops in another order (k, n, m).
// CHECK: #[[CI:[a-z0-9_]+]] = #iree_codegen.compilation_info<lowering_config = #iree_gpu.lowering_config<{promote_operands = [0, 1], reduction = [16, 0, 0], thread = [0, 4, 4], workgroup = [0, 64, 64]}>
// CHECK: func.func @generic_knm
// CHECK: linalg.generic {{.+}} attrs = {compilation_info = #[[CI]]}
func.func @generic_knm(%a: tensor<64x32xf32>, %b: tensor<32x64xf32>, %c: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %0 = linalg.generic {indexing_maps = [affine_map<(k, n, m) -> (m, k)>, affine_map<(k, n, m) -> (k, n)>, affine_map<(k, n, m) -> (m, n)>],
                       iterator_types = ["reduction", "parallel", "parallel"]}
       ins(%a, %b : tensor<64x32xf32>, tensor<32x64xf32>) outs(%c : tensor<64x64xf32>) {
  ^bb0(%x: f32, %y: f32, %acc: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<64x64xf32>
  return %0 : tensor<64x64xf32>
}

// -----

// Not divisible by any choice (M = 100), f64 (no table), and an op that
// already carries compilation_info: all left as they are.
// CHECK: #[[CI:[a-z0-9_]+]] = #iree_codegen.compilation_info<lowering_config = #iree_gpu.lowering_config<{workgroup = [32, 32, 0]}>
// CHECK-NOT: compilation_info<
// CHECK: func.func @left_alone
// CHECK: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<100x64xf32>
// CHECK: linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<64x64xf64>
// CHECK: linalg.matmul {compilation_info = #[[CI]]} ins
func.func @left_alone(%a: tensor<100x64xf32>, %b: tensor<64x64xf32>, %c: tensor<100x64xf32>,
                      %d: tensor<64x64xf64>, %e: tensor<64x64xf32>) -> (tensor<100x64xf32>, tensor<64x64xf64>, tensor<64x64xf32>) {
  %0 = linalg.matmul ins(%a, %b : tensor<100x64xf32>, tensor<64x64xf32>) outs(%c : tensor<100x64xf32>) -> tensor<100x64xf32>
  %1 = linalg.matmul ins(%d, %d : tensor<64x64xf64>, tensor<64x64xf64>) outs(%d : tensor<64x64xf64>) -> tensor<64x64xf64>
  %2 = linalg.matmul {compilation_info = #iree_codegen.compilation_info<lowering_config = #iree_gpu.lowering_config<{workgroup = [32, 32, 0]}>, translation_info = #iree_codegen.translation_info<pipeline = #iree_gpu.pipeline<TileAndFuse> workgroup_size = [64, 1, 1] subgroup_size = 32>>}
         ins(%e, %b : tensor<64x64xf32>, tensor<64x64xf32>) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %0, %1, %2 : tensor<100x64xf32>, tensor<64x64xf64>, tensor<64x64xf32>
}
