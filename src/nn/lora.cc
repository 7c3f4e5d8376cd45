// nn::LoRA adapters: attaching them to a model's Linears, the list of everything else to
// freeze, and folding them into (or out of) the base weights on host values.
#include <algorithm>
#include <cmath>

#include "tensorgrad/errors.h"
#include "tensorgrad/quantize.h"
#include "tensorgrad/nn.h"

namespace tg::nn {

LoRA::LoRA(Linear& linear, int64_t rank_, double alpha_, double dropout_)
    : rank(rank_),
      alpha(alpha_),
      dropout(dropout_),
      lora_A(linear, "lora_A"),
      lora_B(linear, "lora_B"),
      // PEFT draws A with PyTorch's kaiming_uniform(a=√5): bound = √(6/((1+5)·fan_in)) = 1/√in.
      A(lora_A, "weight", {rank_, linear.in_features},
        init::uniform(-1.0 / std::sqrt(static_cast<double>(linear.in_features)),
                      1.0 / std::sqrt(static_cast<double>(linear.in_features))),
        {.decay = true}),
      // B = 0: a fresh adapter adds nothing. Decayed like A (one AdamW group, as in PEFT).
      B(lora_B, "weight", {linear.out_features, rank_}, init::zeros(), {.decay = true}) {}

Tensor LoRA::operator()(const Tensor& x, Loc loc) const {
  const Tensor in = dropout > 0 ? tg::dropout(x, dropout, loc) : x;
  const Tensor down = matmul(in, transpose(A.tensor(loc), -2, -1, loc), loc);  // [..., rank]
  return matmul(down, transpose(B.tensor(loc), -2, -1, loc), loc) * scale();
}

void attach_lora(Linear& linear, int64_t rank, double alpha, double dropout) {
  if (linear.lora_) throw InputError("[add_lora] '" + linear.path() + "' already has a LoRA adapter");
  if (rank < 1) throw InputError("[add_lora] rank must be at least 1, got " + std::to_string(rank));
  if (!std::isfinite(alpha)) throw InputError("[add_lora] alpha must be finite");
  if (!(dropout >= 0 && dropout < 1))
    throw InputError("[add_lora] dropout must be in [0, 1), got " + std::to_string(dropout));
  linear.lora_ = std::make_unique<LoRA>(linear, rank, alpha, dropout);
}

void remove_lora(Module& model) {
  std::vector<Linear*> linears;  // first all of them: a removed adapter's modules leave the tree
  for (Module* m : model.modules())
    if (auto* l = dynamic_cast<Linear*>(m); l != nullptr && l->lora_) linears.push_back(l);
  for (Linear* l : linears) l->lora_.reset();
}

namespace {
bool targeted(const std::string& path, const std::string& target) {
  if (target.empty()) return false;
  if (path == target) return true;
  return path.size() > target.size() &&
         path.compare(path.size() - target.size(), target.size(), target) == 0 &&
         path[path.size() - target.size() - 1] == '.';
}

// Every adapted Linear of `model`. Walking the tree changes nothing, hence the const_cast.
std::vector<const Linear*> adapted(const Module& model) {
  std::vector<const Linear*> out;
  for (Module* m : const_cast<Module&>(model).modules())
    if (const auto* l = dynamic_cast<const Linear*>(m); l != nullptr && l->lora() != nullptr)
      out.push_back(l);
  return out;
}
}  // namespace

std::vector<std::string> add_lora(Module& model, const LoRAOptions& options) {
  if (options.targets.empty()) throw InputError("[add_lora] targets is empty: name the Linears to adapt");
  if (options.rank < 1)  // checked before any Linear changes (attach_lora checks each again)
    throw InputError("[add_lora] rank must be at least 1, got " + std::to_string(options.rank));
  if (!std::isfinite(options.alpha)) throw InputError("[add_lora] alpha must be finite");
  if (!(options.dropout >= 0 && options.dropout < 1))
    throw InputError("[add_lora] dropout must be in [0, 1), got " + std::to_string(options.dropout));
  std::vector<Linear*> chosen;
  std::vector<bool> used(options.targets.size(), false);
  for (Module* m : model.modules()) {
    auto* l = dynamic_cast<Linear*>(m);
    if (l == nullptr) continue;
    bool hit = false;
    for (size_t i = 0; i < options.targets.size(); ++i)
      if (targeted(l->path(), options.targets[i])) hit = used[i] = true;
    if (hit) chosen.push_back(l);
  }
  for (size_t i = 0; i < options.targets.size(); ++i)
    if (!used[i])
      throw InputError(
          "[add_lora] target '" + options.targets[i] +
          "' names no nn::Linear of the model (give a Linear's name such as \"q_proj\" or its path)");
  std::vector<std::string> paths;
  for (Linear* l : chosen) {  // every check passed: now change the model
    attach_lora(*l, options.rank, options.alpha, options.dropout);
    paths.push_back(l->path());
  }
  return paths;
}

std::vector<std::string> lora_frozen(const Module& model) {
  std::vector<const Param*> adapters;
  for (const Linear* l : adapted(model)) adapters.insert(adapters.end(), {&l->lora()->A, &l->lora()->B});
  if (adapters.empty())
    throw InputError("[lora_frozen] the model has no LoRA adapters (call nn::add_lora first)");
  std::vector<std::string> out;
  for (const Param* p : model.root().parameters())
    if (std::find(adapters.begin(), adapters.end(), p) == adapters.end()) out.push_back(p->path());
  return out;
}

namespace {
const HostTensor& find_f32(const std::map<std::string, HostTensor>& params, const std::string& name,
                           const Shape& shape, const char* api) {
  const auto it = params.find(name);
  if (it == params.end()) throw InputError(std::string("[") + api + "] missing '" + name + "'");
  if (it->second.dtype() != DType::kF32 || it->second.shape() != shape)
    throw InputError(std::string("[") + api + "] '" + name + "' must be f32" + shape_str(shape) + ", got " +
                     dtype_name(it->second.dtype()) + shape_str(it->second.shape()));
  return it->second;
}

// W += sign·(alpha/rank)·B·A for every adapter, A and B read from `adapters` (which may be
// `params` itself: only the weights change before the adapter entries are removed).
void fold(const Module& model, std::map<std::string, HostTensor>& params,
          const std::map<std::string, HostTensor>& adapters, double sign, const char* api) {
  for (const Linear* l : adapted(model)) {
    const LoRA& lora = *l->lora();
    const int64_t out = l->out_features, in = l->in_features, r = lora.rank;
    const std::span<const float> a = find_f32(adapters, lora.A.path(), lora.A.shape(), api).f32();
    const std::span<const float> b = find_f32(adapters, lora.B.path(), lora.B.shape(), api).f32();
    // A half-stored base weight (Param::set_dtype) is merged in f32: uploading the result into
    // that model rounds it back.
    if (auto it = params.find(l->weight.path()); it != params.end() && is_half(it->second.dtype()))
      it->second = it->second.to(DType::kF32);
    // A quantized one (Param::quantize_int8, quantize_int4) too, dequantized; its scales and
    // offsets go (uploading the merged f32 weight into that model quantizes it again).
    if (auto it = params.find(l->weight.path()); it != params.end() && it->second.dtype() == DType::kI8) {
      const std::string name = l->weight.path();
      try {
        it->second = dequantize_param(name, l->weight.bits() == 4 ? 4 : 8, it->second, params);
      } catch (const InputError& e) {
        throw InputError(std::string("[") + api + "] '" + name + "': " + e.what());
      }
      params.erase(scale_name(name));
      params.erase(offset_name(name));
    }
    find_f32(params, l->weight.path(), l->weight.shape(), api);
    std::span<float> w = params.at(l->weight.path()).f32();
    const double s = sign * lora.scale();
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        double acc = 0;  // (B·A)[o, i] in double, then one rounding into W
        for (int64_t k = 0; k < r; ++k) acc += double(b[size_t(o * r + k)]) * double(a[size_t(k * in + i)]);
        w[size_t(o * in + i)] = static_cast<float>(double(w[size_t(o * in + i)]) + s * acc);
      }
  }
  for (const Linear* l : adapted(model)) {
    params.erase(l->lora()->A.path());
    params.erase(l->lora()->B.path());
  }
}
}  // namespace

std::map<std::string, HostTensor> merge_lora(const Module& model, std::map<std::string, HostTensor> params) {
  fold(model, params, params, +1.0, "merge_lora");
  return params;
}

std::map<std::string, HostTensor> unmerge_lora(const Module& model, std::map<std::string, HostTensor> merged,
                                               const std::map<std::string, HostTensor>& adapters) {
  fold(model, merged, adapters, -1.0, "unmerge_lora");
  return merged;
}

}  // namespace tg::nn
