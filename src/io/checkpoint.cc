// Training checkpoints (include/tensorgrad/checkpoint.h): the parameters and
// Program::training_state() in one safetensors file, written with save_safetensors (atomic)
// and read back with read_safetensors (validated), then checked against the program before
// anything is uploaded.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tensorgrad/checkpoint.h"
#include "tensorgrad/errors.h"
#include "tensorgrad/quantize.h"

namespace tg {
namespace {

constexpr const char* kFormat = "tensorgrad training checkpoint 1";
constexpr const char* kOptimizerPrefix = "__tg/optimizer/";
constexpr const char* kStatePrefix = "__tg/state/";

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

[[noreturn]] void checkpoint_fail(const std::string& path, const std::string& what) {
  throw CheckpointError("[load_checkpoint] " + path + ": " + what);
}

/// Exact text for a double (hex float) and its inverse.
std::string exact(double v) {
  char text[40];
  std::snprintf(text, sizeof text, "%a", v);
  return text;
}

}  // namespace

void save_checkpoint(const std::string& path, const Program& program,
                     const std::map<std::string, std::string>& metadata) {
  for (const auto& [key, value] : metadata)
    if (starts_with(key, "__tg."))
      throw InputError("[save_checkpoint] metadata key '" + key +
                       "' is reserved (keys starting with \"__tg.\")");
  const TrainingState t = program.training_state();
  std::map<std::string, HostTensor> tensors = program.download_params();
  for (const auto& [name, value] : t.moments) tensors.emplace(kOptimizerPrefix + name, value);
  for (const auto& [name, value] : t.states) tensors.emplace(kStatePrefix + name, value);
  std::map<std::string, std::string> meta = metadata;
  meta["__tg.format"] = kFormat;
  meta["__tg.optimizer"] = t.optimizer;
  meta["__tg.steps"] = std::to_string(t.steps);
  meta["__tg.calls"] = std::to_string(t.calls);
  meta["__tg.lr"] = exact(t.lr);
  save_safetensors(path, tensors, meta);
}

std::map<std::string, std::string> load_checkpoint(const std::string& path, Program& program) {
  std::map<std::string, HostTensor> tensors;
  std::map<std::string, std::string> meta;
  try {
    meta = read_safetensors_metadata(path);
    if (meta.count("__tg.format") == 0 || meta.at("__tg.format") != kFormat)
      checkpoint_fail(path, "not a training checkpoint (no \"__tg.format\": \"" + std::string(kFormat) +
                                "\" metadata; load parameters alone with load_safetensors)");
    tensors = read_safetensors(path);
  } catch (const CheckpointError& e) {
    const std::string what = e.what();
    throw CheckpointError(starts_with(what, "[load_checkpoint]") ? what : "[load_checkpoint] " + what);
  }
  for (const char* key : {"__tg.optimizer", "__tg.steps", "__tg.calls", "__tg.lr"})
    if (meta.count(key) == 0) checkpoint_fail(path, std::string("metadata '") + key + "' is missing");
  TrainingState t;
  t.optimizer = meta.at("__tg.optimizer");
  char* end = nullptr;
  t.steps = std::strtoll(meta.at("__tg.steps").c_str(), &end, 10);
  if (*end != '\0' || t.steps < 0) checkpoint_fail(path, "metadata '__tg.steps' is not a step count");
  const unsigned long long calls = std::strtoull(meta.at("__tg.calls").c_str(), &end, 10);
  if (*end != '\0' || calls > UINT32_MAX) checkpoint_fail(path, "metadata '__tg.calls' is not a call count");
  t.calls = static_cast<uint32_t>(calls);
  t.lr = std::strtod(meta.at("__tg.lr").c_str(), &end);
  if (*end != '\0') checkpoint_fail(path, "metadata '__tg.lr' is not a number");

  std::map<std::string, HostTensor> params;
  for (auto& [name, value] : tensors) {
    if (starts_with(name, kOptimizerPrefix))
      t.moments.emplace(name.substr(std::string(kOptimizerPrefix).size()), std::move(value));
    else if (starts_with(name, kStatePrefix))
      t.states.emplace(name.substr(std::string(kStatePrefix).size()), std::move(value));
    else if (starts_with(name, "__tg/"))
      checkpoint_fail(path, "unknown training tensor '" + name + "'");
    else
      params.emplace(name, std::move(value));
  }
  // Parameters as load_safetensors checks them, then the training state, before any upload.
  const std::map<std::string, HostTensor> current = program.download_params();
  for (const auto& [name, value] : params) {
    const auto it = current.find(name);
    if (it == current.end()) checkpoint_fail(path, "tensor '" + name + "' is not a parameter of the model");
    // Any float type loads, converted as upload_params converts (a checkpoint of the same model
    // has the parameters' own types: resuming is exact).
    const bool as_stored = value.dtype() == DType::kI8 && it->second.dtype() == DType::kI8;
    const bool float_type = value.dtype() == DType::kF32 || is_half(value.dtype()) || as_stored;
    const Shape want = as_stored ? it->second.shape() : dequantized_shape(name, it->second.shape(), current);
    if (!float_type || value.shape() != want)
      checkpoint_fail(path, "tensor '" + name + "' is " + dtype_name(value.dtype()) +
                                shape_str(value.shape()) + ", the model's parameter is " +
                                dtype_name(it->second.dtype()) + shape_str(want));
  }
  // The scales of a quantized parameter the file holds as floats come from quantizing it (as
  // upload_params and load_safetensors take them).
  const auto quantized_from_file = [&](const std::string& name) {
    const std::string base = scaled_weight(name);
    const auto b = current.find(base);
    const auto f = params.find(base);
    return b != current.end() && b->second.dtype() == DType::kI8 && f != params.end() &&
           f->second.dtype() != DType::kI8;
  };
  for (const auto& [name, value] : current)
    if (params.count(name) == 0 && !quantized_from_file(name))
      checkpoint_fail(path, "parameter '" + name + "' is missing");
  const TrainingState before = program.training_state();
  try {
    program.restore_training_state(t);
  } catch (const InputError& e) {
    const std::string what = e.what();
    const std::string tag = "[restore_training_state] ";
    checkpoint_fail(path, starts_with(what, tag.c_str()) ? what.substr(tag.size()) : what);
  }
  try {
    program.upload_params(params);
  } catch (...) {
    program.restore_training_state(before);
    throw;
  }
  for (auto it = meta.begin(); it != meta.end();)
    it = starts_with(it->first, "__tg.") ? meta.erase(it) : std::next(it);
  return meta;
}

}  // namespace tg
