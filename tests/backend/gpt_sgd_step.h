// One training step of a GPT with SGD at lr = 1, so that each parameter's change is its
// gradient: the whole-model GPU tests (TF32, 3xTF32) compare those against the reference.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"

namespace tg::testing {

struct GptStepResult {
  float loss = 0;
  std::map<std::string, std::vector<float>> grads;  // parameter before − after
};

/// Fixed token ids and targets (below config.vocab); parameters from `start` when given, else
/// the model's seed-0 initialisation, which `initial` receives. `describe`: the step's kernels.
inline GptStepResult gpt_sgd_step(const nn::GptConfig& config, int64_t batch, Device device,
                                  Precision precision, const std::map<std::string, HostTensor>* start,
                                  std::map<std::string, HostTensor>* initial,
                                  std::string* describe = nullptr) {
  const int64_t T = config.seq_len;
  nn::Gpt model(config);
  Program p =
      compile_train(model, [&model](Tensor ids, Tensor targets) { return model.loss(ids, targets); },
                    {.inputs = {{"ids", {batch, T}, DType::kI32}, {"targets", {batch, T}, DType::kI32}},
                     .optimizer = SGD{.lr = 1.0},
                     .device = device,
                     .precision = precision});
  if (describe) *describe = p.describe();
  if (start) p.upload_params(*start);
  const auto before = p.download_params();
  if (initial) *initial = before;
  std::vector<int32_t> ids(static_cast<size_t>(batch * T)), targets(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((i * 37 + 11) % static_cast<size_t>(config.vocab));
    targets[i] = static_cast<int32_t>((i * 53 + 5) % static_cast<size_t>(config.vocab));
  }
  GptStepResult r;
  r.loss = p.step({{"ids", ids}, {"targets", targets}});
  for (const auto& [name, t] : p.download_params()) {
    const std::span<const float> a = before.at(name).f32(), b = t.f32();
    std::vector<float>& g = r.grads[name];
    for (size_t i = 0; i < a.size(); ++i) g.push_back(a[i] - b[i]);
  }
  return r;
}

}  // namespace tg::testing
