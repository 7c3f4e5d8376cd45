// The small Llama the tests of stored weights share (param_dtype_test: bf16/f16-held weights;
// quantize_test: int8 ones): its configuration, ids of a fixed batch, and a logits program.
#pragma once
#include <tensorgrad/tensorgrad.h>

#include <vector>

namespace tg::testing {

constexpr int64_t kStoredBatch = 2, kStoredSeq = 8, kStoredVocab = 48;

inline nn::LlamaConfig stored_config(bool tied_head) {
  return {.vocab = kStoredVocab,
          .seq_len = kStoredSeq,
          .layers = 2,
          .d_model = 32,
          .heads = 4,
          .kv_heads = 2,
          .mlp_hidden = 64,
          .tied_head = tied_head};
}

/// [kStoredBatch, kStoredSeq] token ids; `shift` gives another batch.
inline std::vector<int32_t> stored_ids(int shift = 0) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < kStoredBatch * kStoredSeq; ++i)
    v.push_back(static_cast<int32_t>((i * 7 + 3 + shift) % kStoredVocab));
  return v;
}

inline Program stored_logits_program(nn::Llama& model, Device device, Precision precision) {
  return compile_forward(model, [&](Tensor x) { return model.logits(x); },
                         {.inputs = {{"ids", {kStoredBatch, kStoredSeq}, DType::kI32}},
                          .device = device,
                          .precision = precision});
}

}  // namespace tg::testing
