// Device source of the attention paths that live in attention_paths.cc and attention_mma.cc
// (used by attention.cc).
#pragma once

namespace tg::backend::cuda::attention_paths {

/// Device helpers both tiled paths (fp32 and tf32) share, after a path's constants.
extern const char* const kCommon;
/// Short sequences (T, S <= 64): a block handles whole (batch, kv head) groups in shared memory.
extern const char* const kSmall;
/// Helpers of the fp32 tiled kernels (after kCommon and the path's constants).
extern const char* const kFp32Helpers;
/// TF32 tensor cores (mma.sync m16n8k8) for Precision::kTf32.
extern const char* const kMma;

}  // namespace tg::backend::cuda::attention_paths
