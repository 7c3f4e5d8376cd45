// GPTQ and AWQ checkpoints (config.json's quantization_config.quant_method "gptq" or "awq"): a
// quantized Linear is stored as integer codes packed in I32 words, a zero point and a scale per
// group of inputs, instead of "<prefix>.weight". Each one becomes one deferred "<prefix>.weight"
// [out, in] of Weights, read when the loader takes it, so every family loads these files:
//   - its values, w[o][i] = (q − z) · s of i's group, in f32 (exact for f16 or bf16 scales: a
//     code difference of at most 8 bits times an 8- or 11-bit significand);
//   - for 4 bits in contiguous groups, also its codes with scale s and offset −z·s per group,
//     Param::quantize_int4's layout, which a 4-bit parameter of the same group takes as it is.
// Layouts (p = 32 / bits codes a word, the lowest bits first):
//   GPTQ  qweight [in / p, out]: word [r][o] holds inputs p·r … p·r + p − 1 of output o;
//         qzeros [G, out / p] packed along the outputs; scales [G, out]; g_idx [in] each input's
//         group (optional; desc_act files scatter the groups); "checkpoint_format" "gptq"
//         (AutoGPTQ's, the default) stores each zero point minus one, wrapped to the bits,
//         "gptq_v2" the zero point itself.
//   AWQ   ("version" "gemm", 4 bits) qweight [in, out / 8] and qzeros [G, out / 8] packed along
//         the outputs in the order 0 2 4 6 1 3 5 7: nibble k of word c holds output 8c + order[k];
//         scales [G, out]; groups contiguous.
#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/pretrained_internal.h"
#include "tensorgrad/errors.h"

namespace tg::pretrained::detail {
namespace {

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// "I32" for "i32": a dtype as safetensors files name it.
std::string upper(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

// The packed tensors of one Linear, shared by its deferred readers.
struct Packed {
  PackedScheme scheme;
  int64_t in = 0, out = 0, group = 0, groups = 0;
  std::vector<int32_t> qweight, qzeros, g_idx;  // g_idx empty: contiguous groups
  std::vector<float> scales;                    // [groups, out]

  int words_per_value() const { return 32 / scheme.bits; }
  uint32_t mask() const { return (1u << scheme.bits) - 1; }
  // AWQ's position of output o % 8 within its word (the inverse of the order 0 2 4 6 1 3 5 7).
  static int awq_slot(int64_t o) {
    constexpr std::array<int, 8> kSlot{0, 4, 1, 5, 2, 6, 3, 7};
    return kSlot[static_cast<size_t>(o % 8)];
  }
  uint32_t code(int64_t i, int64_t o) const {
    if (scheme.method == "awq") {
      const auto w = static_cast<uint32_t>(qweight[static_cast<size_t>(i * (out / 8) + o / 8)]);
      return (w >> (4 * awq_slot(o))) & 15u;
    }
    const int p = words_per_value();
    const auto w = static_cast<uint32_t>(qweight[static_cast<size_t>((i / p) * out + o)]);
    return (w >> (scheme.bits * static_cast<int>(i % p))) & mask();
  }
  uint32_t zero(int64_t g, int64_t o) const {
    if (scheme.method == "awq") {
      const auto w = static_cast<uint32_t>(qzeros[static_cast<size_t>(g * (out / 8) + o / 8)]);
      return (w >> (4 * awq_slot(o))) & 15u;
    }
    const int p = words_per_value();
    const auto w = static_cast<uint32_t>(qzeros[static_cast<size_t>(g * (out / p) + o / p)]);
    const uint32_t z = (w >> (scheme.bits * static_cast<int>(o % p))) & mask();
    return scheme.v1_zeros ? (z + 1) & mask() : z;
  }
  int64_t group_of(int64_t i) const { return g_idx.empty() ? i / group : g_idx[static_cast<size_t>(i)]; }
  float scale(int64_t g, int64_t o) const { return scales[static_cast<size_t>(g * out + o)]; }

  HostTensor values() const {
    std::vector<float> w(static_cast<size_t>(out * in));
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        const int64_t g = group_of(i);
        const auto diff =
            static_cast<float>(static_cast<int32_t>(code(i, o)) - static_cast<int32_t>(zero(g, o)));
        w[static_cast<size_t>(o * in + i)] = diff * scale(g, o);
      }
    return HostTensor::f32(std::move(w), {out, in});
  }
  Quantized4Tensor codes() const {
    Quantized4Tensor t{HostTensor(DType::kI8, {out, in / 2}), HostTensor(DType::kF32, {out, groups}),
                       HostTensor(DType::kF32, {out, groups})};
    auto* q = static_cast<uint8_t*>(t.q.data());
    if (scheme.method == "gptq") {  // a word [r][o] is inputs 8r … 8r + 7 in our byte order already
      for (int64_t o = 0; o < out; ++o)
        for (int64_t r = 0; r < in / 8; ++r) {
          const auto word = static_cast<uint32_t>(qweight[static_cast<size_t>(r * out + o)]);
          for (int b = 0; b < 4; ++b) q[o * (in / 2) + 4 * r + b] = static_cast<uint8_t>(word >> (8 * b));
        }
    } else {
      for (int64_t o = 0; o < out; ++o)
        for (int64_t j = 0; j < in / 2; ++j)
          q[o * (in / 2) + j] = static_cast<uint8_t>(code(2 * j, o) | (code(2 * j + 1, o) << 4));
    }
    const std::span<float> s = t.scale.f32(), off = t.offset.f32();
    for (int64_t o = 0; o < out; ++o)
      for (int64_t g = 0; g < groups; ++g) {
        s[static_cast<size_t>(o * groups + g)] = scale(g, o);
        off[static_cast<size_t>(o * groups + g)] = -static_cast<float>(zero(g, o)) * scale(g, o);
      }
    return t;
  }
};

std::vector<int32_t> ints(const HostTensor& t) {
  const std::span<const int32_t> v = t.i32();
  return {v.begin(), v.end()};
}

}  // namespace

std::optional<PackedScheme> packed_scheme(const json& c, const std::string& f) {
  if (!c.contains("quantization_config") || c["quantization_config"].is_null()) return std::nullopt;
  const json& q = c["quantization_config"];
  const std::string dump = q.dump().substr(0, 200);
  if (!q.is_object()) fail(f, "config.json: quantization_config is " + dump + ", expected an object");
  const std::string method = lower(field<std::string>(q, f, "quant_method", ""));
  PackedScheme s;
  s.method = method;
  if (method == "gptq") {
    s.bits = static_cast<int>(field<int64_t>(q, f, "bits", 4));
    s.group = field<int64_t>(q, f, "group_size", 128);
    const std::string format =
        lower(field<std::string>(q, f, "checkpoint_format", field<std::string>(q, f, "format", "gptq")));
    if (format != "gptq" && format != "gptq_v2")
      fail(f, "config.json: GPTQ checkpoint_format \"" + format +
                  "\" is not read (GPTQ's own \"gptq\" and \"gptq_v2\" layouts are; a kernel's repacked "
                  "layout such as marlin's is not)");
    s.v1_zeros = format == "gptq";
  } else if (method == "awq") {
    s.bits = static_cast<int>(field<int64_t>(q, f, "bits", field<int64_t>(q, f, "w_bit", 4)));
    s.group = field<int64_t>(q, f, "group_size", field<int64_t>(q, f, "q_group_size", 128));
    const std::string version = lower(field<std::string>(q, f, "version", "gemm"));
    const std::string backend = lower(field<std::string>(q, f, "backend", "autoawq"));
    if (version != "gemm" || backend != "autoawq")
      fail(f, "config.json: AWQ version \"" + version + "\" (backend \"" + backend +
                  "\") is not read; AutoAWQ's \"gemm\" layout is, which most published AWQ checkpoints use");
    if (!field<bool>(q, f, "zero_point", true))
      fail(f, "config.json: AWQ without zero points (zero_point false) is not read");
  } else if (method == "fp8" || method == "compressed-tensors") {
    return fp8_scheme(q, f, method);
  } else {
    fail(f,
         "config.json: quantization_config's quant_method \"" + method +
             "\" is not read; tensorgrad reads GPTQ, AWQ and FP8 checkpoints (and gpt-oss's MXFP4 experts): "
             "load the model's unquantized release");
  }
  if (method == "gptq" ? s.bits != 4 && s.bits != 8 : s.bits != 4)
    fail(f, "config.json: " + method + " with " + std::to_string(s.bits) + " bits is not read (" +
                (method == "gptq" ? "4 and 8 bits are" : "4 bits are") + ")");
  if (s.group != -1 && s.group <= 0)
    fail(f, "config.json: quantization_config's group_size is " + std::to_string(s.group) +
                ", expected a positive number or -1 (one group a row)");
  return s;
}

void unpack_packed_linears(Weights& w, const std::string& folder) {
  std::vector<std::string> prefixes;
  for (const auto& [name, t] : w.tensors)
    if (name.ends_with(".qweight")) prefixes.push_back(name.substr(0, name.size() - 8));
  if (prefixes.empty()) return;
  const std::optional<PackedScheme> scheme =
      packed_scheme(read_json(folder, std::filesystem::path(folder) / "config.json"), folder);
  if (!scheme)
    fail(
        folder,
        w.file_of[prefixes.front() + ".qweight"] + ": tensor '" + prefixes.front() +
            ".qweight' is a packed quantized weight, but config.json has no GPTQ or AWQ quantization_config");
  const bool awq = scheme->method == "awq";
  for (const std::string& prefix : prefixes) {
    const std::string file = w.file_of[prefix + ".qweight"];
    auto take = [&](const std::string& part, bool required) -> std::optional<HostTensor> {
      auto it = w.tensors.find(prefix + "." + part);
      if (it == w.tensors.end()) {
        if (required)
          fail(folder,
               file + ": tensor '" + prefix + ".qweight' has no '" + prefix + "." + part + "' beside it");
        return std::nullopt;
      }
      HostTensor t = std::move(it->second);
      w.tensors.erase(it);
      w.file_of.erase(prefix + "." + part);
      return t;
    };
    auto p = std::make_shared<Packed>();
    p->scheme = *scheme;
    const HostTensor qweight = *take("qweight", true), qzeros = *take("qzeros", true),
                     scales = *take("scales", true);
    const std::optional<HostTensor> g_idx = awq ? std::nullopt : take("g_idx", false);
    auto expect = [&](const HostTensor& t, const std::string& part, DType type, const Shape& shape) {
      const bool floats = type == DType::kF32;
      const bool type_ok = floats ? t.dtype() == DType::kF32 || is_half(t.dtype()) : t.dtype() == type;
      if (!type_ok || t.shape() != shape)
        fail(folder, file + ": tensor '" + prefix + "." + part + "' is " + upper(dtype_name(t.dtype())) +
                         " " + shape_str(t.shape()) + ", expected " + (floats ? "F16, BF16 or F32" : "I32") +
                         " " + shape_str(shape) + " (" + scheme->method + ", " +
                         std::to_string(scheme->bits) + " bits, groups of " + std::to_string(p->group) + ")");
    };
    if (qweight.dtype() != DType::kI32 || qweight.shape().size() != 2)
      fail(folder, file + ": tensor '" + prefix + ".qweight' is " + upper(dtype_name(qweight.dtype())) + " " +
                       shape_str(qweight.shape()) + ", expected I32 of rank 2");
    const int per = p->words_per_value();
    p->in = awq ? qweight.shape()[0] : qweight.shape()[0] * per;
    p->out = awq ? qweight.shape()[1] * 8 : qweight.shape()[1];
    p->group = scheme->group == -1 ? p->in : scheme->group;
    if (p->in % p->group != 0)
      fail(folder, file + ": tensor '" + prefix + ".qweight' has " + std::to_string(p->in) +
                       " inputs, which groups of " + std::to_string(p->group) + " do not divide");
    p->groups = p->in / p->group;
    if (p->out % per != 0)
      fail(folder, file + ": tensor '" + prefix + ".qweight' has " + std::to_string(p->out) +
                       " outputs, not a multiple of the " + std::to_string(per) + " zero points a word");
    expect(qzeros, "qzeros", DType::kI32, {p->groups, p->out / (awq ? 8 : per)});
    expect(scales, "scales", DType::kF32, {p->groups, p->out});
    p->qweight = ints(qweight);
    p->qzeros = ints(qzeros);
    p->scales = std::move(scales.to(DType::kF32)).f32();
    if (g_idx) {
      expect(*g_idx, "g_idx", DType::kI32, {p->in});
      p->g_idx = ints(*g_idx);
      bool contiguous = true;
      for (int64_t i = 0; i < p->in; ++i) {
        const int32_t g = p->g_idx[static_cast<size_t>(i)];
        if (g < 0 || g >= p->groups)
          fail(folder, file + ": tensor '" + prefix + ".g_idx' puts input " + std::to_string(i) +
                           " in group " + std::to_string(g) + " of " + std::to_string(p->groups));
        contiguous = contiguous && g == i / p->group;
      }
      if (contiguous) p->g_idx.clear();
    }
    const std::string name = prefix + ".weight";
    if (w.tensors.count(name) || w.deferred.count(name))
      fail(folder, file + ": tensor '" + name + "' is there beside '" + prefix + ".qweight'");
    Weights::Deferred d{{p->out, p->in}, [p] { return p->values(); }, {}};
    if (scheme->bits == 4 && p->g_idx.empty() && p->in % 2 == 0) {
      d.read_int4 = [p] { return p->codes(); };
      d.int4_group = p->group;
    }
    d.file_bits = scheme->bits;
    w.deferred[name] = std::move(d);
    w.file_of[name] =
        file + " (" + prefix + ".qweight, " + scheme->method + " " + std::to_string(scheme->bits) + " bits)";
  }
}

}  // namespace tg::pretrained::detail
