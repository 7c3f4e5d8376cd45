// Fuzz target: load_checkpoint and load_safetensors of arbitrary files into a small training
// program. Each load either succeeds or throws CheckpointError leaving the parameters and
// the training state exactly as they were.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "fuzz_util.h"
#include "tensorgrad/tensorgrad.h"

namespace {

struct Net : tg::Module {
  tg::nn::Linear l1{*this, "l1", 3, 4};
  tg::nn::Linear l2{*this, "l2", 4, 2};
};

struct Fixture {
  Net net;
  tg::Program train = tg::compile_train(
      net, [this](tg::Tensor x) { return tg::mean(net.l2(tg::relu(net.l1(x)))); },
      {.inputs = {{"x", {2, 3}}}, .optimizer = tg::Adam{.lr = 1e-2}, .device = tg::Device::cpu()});
};

bool same(const std::map<std::string, tg::HostTensor>& a, const std::map<std::string, tg::HostTensor>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a) {
    const auto it = b.find(name);
    if (it == b.end() || it->second.numel() != t.numel() ||
        std::memcmp(t.data(), it->second.data(), static_cast<size_t>(t.numel()) * 4) != 0)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* f = new Fixture;
  f->train.init_params(1);
  const tg_fuzz::MemFile file(data, size);
  const auto params = f->train.download_params();
  const tg::TrainingState state = f->train.training_state();
  try {
    (void)tg::load_checkpoint(file.path(), f->train);
  } catch (const tg::CheckpointError&) {
    if (!same(params, f->train.download_params()) ||
        !same(state.moments, f->train.training_state().moments) || f->train.steps() != state.steps)
      __builtin_trap();
  }
  try {
    tg::load_safetensors(file.path(), f->train, {.partial = true});
  } catch (const tg::CheckpointError&) {
  }
  return 0;
}
