// pretrained::load(folder, {.dtype = DType::kI8[, .bits = 4]}): every Linear's weight quantized to
// 8 (or 4) bits (tensorgrad/quantize.h), the other matrices held as bf16. For each tiny folder transformers
// wrote, the quantized model computes what the f32 model computes with the dequantized weights
// (on every backend; under bf16 products, what the reference backend computes), stays near the
// f32 model's logits, and saves back
// as an f32 folder of the dequantized weights.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;
namespace fs = std::filesystem;

/// The values the quantized model computes with, as f32 parameters of the unquantized model.
std::map<std::string, HostTensor> effective_weights(const pretrained::Model& q) {
  std::map<std::string, HostTensor> out;
  for (const Param* p : q.module->parameters()) {
    if (p->scales() != nullptr) continue;
    const HostTensor& t = q.weights.at(p->path());
    out[p->path()] =
        p->dtype() == DType::kI8 ? dequantize_param(p->path(), p->bits(), t, q.weights) : t.to(DType::kF32);
  }
  return out;
}

std::vector<float> logits(const pretrained::Model& lm, const std::map<std::string, HostTensor>& w,
                          const HostTensor& ids, Device device, Precision precision) {
  Program p = compile_forward(
      *lm.module, [&lm](Tensor x) { return lm.logits(x); },
      {.inputs = {{"ids", ids.shape(), DType::kI32}}, .device = device, .precision = precision});
  p.upload_params(w);
  return p.run({{"ids", ids.i32()}}).f32();
}

struct QuantCase {
  std::string name;
  int bits;
};

TEST(PretrainedQuantized, QuantizedFoldersComputeTheDequantizedModel) {
  for (const auto& [name, bits] :
       {QuantCase{"tiny_llama", 8}, QuantCase{"tiny_gpt2", 8}, QuantCase{"tiny_mamba", 8},
        QuantCase{"tiny_bert", 8}, QuantCase{"tiny_qwen2_moe", 8}, QuantCase{"tiny_llama", 4},
        QuantCase{"tiny_gpt2", 4}}) {
    SCOPED_TRACE(name + ", " + std::to_string(bits) + " bits");
    const std::string dir = std::string(TG_TEST_DATA_DIR) + "/" + name;
    const pretrained::Model q = pretrained::load(dir, {.dtype = DType::kI8, .group = 16, .bits = bits}),
                            full = pretrained::load(dir);
    EXPECT_EQ(q.dtype, DType::kI8);
    int quantized = 0;
    for (const Param* p : q.module->parameters()) {
      // A mixture's experts (stacked per layer for grouped_matmul) are held as bf16.
      if (p->path().find(".experts.") != std::string::npos) {
        EXPECT_EQ(p->dtype(), DType::kBF16) << p->path();
      }
      if (p->dtype() != DType::kI8) continue;
      ++quantized;
      EXPECT_EQ(q.weights.at(p->path()).dtype(), DType::kI8) << p->path();
      EXPECT_EQ(p->bits(), bits) << p->path();
      EXPECT_EQ(q.weights.at(p->path()).shape(), p->stored_shape()) << p->path();
      EXPECT_EQ(q.weights.at(p->scale()->path()).shape().back() * 16, p->shape().back()) << p->path();
    }
    EXPECT_GT(quantized, 0);
    const std::map<std::string, HostTensor> effective = effective_weights(q);
    const std::map<std::string, HostTensor> golden = read_safetensors(dir + "/logits.safetensors");
    const HostTensor& ids = golden.at("ids");
    for (const Device& device : tg::testing::all_devices())
      for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
        SCOPED_TRACE(device.str() + (precision == Precision::kBf16 ? ", bf16 products" : ""));
        const std::vector<float> got = logits(q, q.weights, ids, device, precision);
        // Under bf16 products a skinny product (quant_matmul) reads the dequantized weights in f32
        // where the unquantized model's rounds them to bf16: against the reference backend then,
        // whose sums (in double) may round an activation to the neighbouring bf16 value (2⁻⁸
        // apart) where a backend's f32 sums do not.
        EXPECT_LT(tg::testing::rel_diff(got, precision == Precision::kFp32
                                                 ? logits(full, effective, ids, device, precision)
                                                 : logits(q, q.weights, ids, Device::ref(), precision)),
                  precision == Precision::kFp32 ? 2e-6 : 1e-2);
        if (precision == Precision::kFp32) {
          const double d = tg::testing::rel_diff(got, logits(full, full.weights, ids, device, precision));
          EXPECT_GT(d, 1e-5);                     // the quantization is seen,
          EXPECT_LT(d, bits == 8 ? 3e-2 : 0.25);  // and small
          std::printf("  %s on %s: int%d logits against the f32 model's %.2e\n", name.c_str(),
                      device.str().c_str(), bits, d);
        }
      }
    // save writes the dequantized weights as an f32 folder, which loads back as those values.
    const fs::path out =
        fs::temp_directory_path() / ("tg_quantized_" + std::to_string(getpid()) + "_" + name);
    pretrained::save(q, q.weights, out.string());
    const pretrained::Model back = pretrained::load(out.string());
    for (const auto& [param, t] : effective)
      EXPECT_EQ(0, tg::testing::rel_diff(back.weights.at(param).f32(), t.f32())) << param;
    fs::remove_all(out);
  }
  EXPECT_THROW(
      pretrained::load(std::string(TG_TEST_DATA_DIR) + "/tiny_llama", {.dtype = DType::kI8, .group = -4}),
      Error);
}

}  // namespace
