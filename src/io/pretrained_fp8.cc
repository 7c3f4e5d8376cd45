// FP8 checkpoints: a Linear's weight stored as F8_E4M3 values with f32 (or bf16) scales, in the
// two layouts published checkpoints use:
//   - quant_method "fp8" (transformers' fine-grained FP8: DeepSeek-V3, Qwen3-…-FP8): "<prefix>.
//     weight_scale_inv" holds one scale per block of weight_block_size [rows, cols] (128 × 128
//     by default; the last blocks of a row or column may be partial), or one for the tensor;
//   - quant_method "compressed-tensors" with float-quantized 8-bit weights (llm-compressor's
//     "FP8" and "FP8-dynamic" models): "<prefix>.weight_scale" holds one scale for the tensor
//     ("tensor"), one a row ("channel", [out, 1]) or one a block ("block", block_structure).
// Each weight becomes one deferred "<prefix>.weight" of its values, w = e4m3 · scale computed in
// f32 (one rounding), as transformers dequantizes it; held then as LoadOptions::dtype says. The
// activations are not quantized: the model computes with the weights' values (an "input_scale"
// the file holds for static activation quantization is left unread).
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/pretrained_internal.h"
#include "tensorgrad/errors.h"

namespace tg::pretrained::detail {
namespace {

// An OCP FP8 E4M3 ("e4m3fn") byte as f32: sign, 4 exponent bits (bias 7), 3 mantissa bits; no
// infinities, S.1111.111 is NaN (kept: transformers computes with it too), exponent 0 holds the
// subnormals m · 2^-9.
float e4m3(uint8_t b) {
  const int exponent = (b >> 3) & 15, mantissa = b & 7;
  float v = 0.f;
  if (exponent == 15 && mantissa == 7)
    v = std::numeric_limits<float>::quiet_NaN();
  else if (exponent == 0)
    v = std::ldexp(static_cast<float>(mantissa), -9);
  else
    v = std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
  return (b & 0x80) != 0 ? -v : v;
}

struct Fp8Weight {
  int64_t out = 0, in = 0;
  int64_t block_rows = 0, block_cols = 0;  // what one scale covers
  HostTensor bytes;                        // i8 [out, in]: the E4M3 values
  std::vector<float> scales;               // [ceil(out / block_rows), ceil(in / block_cols)]

  HostTensor values() const {
    const int64_t per_row = (in + block_cols - 1) / block_cols;
    const auto* b = static_cast<const uint8_t*>(bytes.data());
    std::vector<float> w(static_cast<size_t>(out * in));
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i)
        w[static_cast<size_t>(o * in + i)] =
            e4m3(b[o * in + i]) * scales[static_cast<size_t>(o / block_rows * per_row + i / block_cols)];
    return HostTensor::f32(std::move(w), {out, in});
  }
};

}  // namespace

PackedScheme fp8_scheme(const json& q, const std::string& f, const std::string& method) {
  PackedScheme s;
  s.method = method;
  s.bits = 8;
  s.group = 0;
  auto block_of = [&](const json& b, const std::string& what) {
    if (b.is_null()) return;
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
        b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0)
      fail(f, "config.json: " + what + " is " + b.dump() + ", expected [rows, columns]");
    s.block_rows = b[0].get<int64_t>();
    s.block_cols = b[1].get<int64_t>();
  };
  if (method == "fp8") {
    const std::string fmt = field<std::string>(q, f, "fmt", "e4m3");
    if (fmt != "e4m3") fail(f, "config.json: FP8 fmt \"" + fmt + "\" is not read (e4m3 is)");
    if (!q.contains("weight_block_size")) {
      s.block_rows = s.block_cols = 128;  // FineGrainedFP8Config's default
    } else {
      block_of(q["weight_block_size"], "quantization_config.weight_block_size");
    }
    return s;
  }
  // compressed-tensors: every config group's weights 8-bit floats, with one strategy.
  s.fp8_scale = "weight_scale";
  const std::string format = field<std::string>(q, f, "format", "");
  if (format != "float-quantized")
    fail(f, "config.json: compressed-tensors format \"" + format +
                "\" is not read (its FP8 weights, \"float-quantized\", are; GPTQ and AWQ files are read in "
                "their own formats)");
  if (q.contains("kv_cache_scheme") && !q["kv_cache_scheme"].is_null())
    fail(f, "config.json: compressed-tensors kv_cache_scheme " + q["kv_cache_scheme"].dump().substr(0, 120) +
                " is not read (an FP8 KV cache)");
  if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].empty())
    fail(f, "config.json: compressed-tensors quantization_config has no config_groups");
  std::string strategy;
  for (const auto& [name, g] : q["config_groups"].items()) {
    const json* w = g.is_object() && g.contains("weights") ? &g["weights"] : nullptr;
    if (w == nullptr || !w->is_object())
      fail(f, "config.json: compressed-tensors config group \"" + name + "\" has no weights scheme");
    const int64_t bits = field<int64_t>(*w, f, "num_bits", 0);
    const std::string type = field<std::string>(*w, f, "type", "");
    const std::string here = field<std::string>(*w, f, "strategy", "tensor");
    if (bits != 8 || type != "float")
      fail(f, "config.json: compressed-tensors config group \"" + name + "\" quantizes weights to " +
                  std::to_string(bits) + "-bit " + type + " values; 8-bit floats (FP8) are read");
    if (here != "tensor" && here != "channel" && here != "block")
      fail(f, "config.json: compressed-tensors strategy \"" + here +
                  "\" is not read (tensor, channel and block are)");
    if (!strategy.empty() && here != strategy)
      fail(f,
           "config.json: compressed-tensors config groups mix the strategies " + strategy + " and " + here);
    strategy = here;
    if (here == "block") {
      if (!w->contains("block_structure"))
        fail(f, "config.json: compressed-tensors config group \"" + name +
                    "\" has strategy block but no block_structure");
      block_of((*w)["block_structure"], "block_structure");
    }
  }
  return s;
}

void unpack_fp8_weights(Weights& w, const std::string& folder) {
  if (w.fp8.empty()) return;
  const std::optional<PackedScheme> scheme =
      packed_scheme(read_json(folder, std::filesystem::path(folder) / "config.json"), folder);
  const std::string first = *w.fp8.begin();
  if (!scheme || (scheme->method != "fp8" && scheme->method != "compressed-tensors"))
    fail(folder, w.file_of[first] + ": tensor '" + first +
                     "' holds F8_E4M3 values, but config.json has no FP8 quantization_config");
  for (const std::string& name : w.fp8) {
    const std::string prefix = name.substr(0, name.size() - 7);  // less ".weight"
    const std::string file = w.file_of[name];
    auto f8 = std::make_shared<Fp8Weight>();
    f8->bytes = std::move(w.tensors.at(name));
    w.tensors.erase(name);
    if (f8->bytes.shape().size() != 2)
      fail(folder, file + ": FP8 tensor '" + name + "' has shape " + shape_str(f8->bytes.shape()) +
                       ", expected a matrix [out, in]");
    f8->out = f8->bytes.shape()[0];
    f8->in = f8->bytes.shape()[1];
    const std::string scale_name = prefix + "." + scheme->fp8_scale;
    const auto sc = w.tensors.find(scale_name);
    if (sc == w.tensors.end())
      fail(folder, file + ": FP8 tensor '" + name + "' has no '" + scale_name + "' beside it");
    const HostTensor scale = std::move(sc->second);
    w.tensors.erase(sc);
    w.file_of.erase(scale_name);
    for (const char* unread : {".input_scale", ".activation_scale"})  // static activation scales
      if (w.tensors.erase(prefix + unread)) w.file_of.erase(prefix + unread);
    // What one scale covers: the whole tensor (one scale), a row (one a row), or a block.
    const Shape& ss = scale.shape();
    int64_t rows = scheme->block_rows, cols = scheme->block_cols;
    if (scale.numel() == 1) {
      rows = f8->out, cols = f8->in;
    } else if (rows == 0 && (ss == Shape{f8->out, 1} || ss == Shape{f8->out})) {
      rows = 1, cols = f8->in;
    }
    if (rows == 0)
      fail(folder, file + ": tensor '" + scale_name + "' has shape " + shape_str(ss) +
                       ", expected one scale, or one a row " + shape_str({f8->out, 1}));
    const Shape want{(f8->out + rows - 1) / rows, (f8->in + cols - 1) / cols};
    if (scale.numel() != 1 && ss != want && !(cols == f8->in && ss == Shape{want[0]}))
      fail(folder, file + ": tensor '" + scale_name + "' has shape " + shape_str(ss) + ", expected " +
                       shape_str(want) + " (a scale per " + std::to_string(rows) + " × " +
                       std::to_string(cols) + " block of " + name + " " + shape_str(f8->bytes.shape()) + ")");
    if (scale.dtype() != DType::kF32 && !is_half(scale.dtype()))
      fail(folder, file + ": tensor '" + scale_name + "' is not a float tensor");
    f8->block_rows = rows;
    f8->block_cols = cols;
    f8->scales = std::move(scale.to(DType::kF32)).f32();
    Weights::Deferred d{{f8->out, f8->in}, [f8] { return f8->values(); }, {}};
    d.file_bits = 8;
    w.deferred[name] = std::move(d);
    w.file_of[name] = file + " (" + name + ", F8_E4M3 with " + scheme->fp8_scale + ")";
  }
  w.fp8.clear();
}

}  // namespace tg::pretrained::detail
