// Modules and parameters. A model is a tree of Modules; each Param is declared once as a
// member, with its name, shape, init and weight-decay flag, and gets a hierarchical name
// from where it sits (`blocks.3.attn.wq`). During tracing a Param converts to a Tensor.
//
//   struct Net : tg::Module {
//     tg::nn::Linear fc{*this, "fc", 4, 2};
//     tg::Param scale{*this, "scale", {2}, tg::init::ones()};
//     tg::Tensor operator()(tg::Tensor x) const { return fc(x) * scale; }
//   };
//
// Parameter values live in storage owned by the root module, one copy per device, shared
// by every program compiled from that model on that device.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tensorgrad/tensor.h"

namespace tg {

namespace detail {
struct ModelStorage;
/// A new, empty per-model parameter storage (runtime/storage.cc).
std::shared_ptr<ModelStorage> make_model_storage();
}  // namespace detail

/// How a parameter is filled by `init_params(seed)`. Fan-in/fan-out follow PyTorch: for a
/// shape [out, in, k…], fan_in = in·k…, fan_out = out·k…; a rank-1 shape has fan_in = n.
struct Init {
  enum class Kind {
    kNormal,
    kUniform,
    kConstant,
    kKaimingUniform,
    kKaimingNormal,
    kXavierUniform,
    kXavierNormal,
    kCallable
  };
  Kind kind = Kind::kNormal;
  double a = 0, b = 1;  // normal: mean, std · uniform: low, high · constant: value · kaiming/xavier: gain
  /// kCallable: fills `values` (row-major, shape `shape`) from a generator seeded for this parameter.
  std::function<void(std::span<float> values, const Shape& shape, uint64_t seed)> fn = {};
};

namespace init {
Init normal(double std = 1.0, double mean = 0.0);
Init uniform(double low, double high);
Init zeros();
Init ones();
Init constant(double value);
/// He init: std = gain/√fan_in (normal) or bound = gain·√(3/fan_in) (uniform). gain √2 suits ReLU.
Init kaiming_normal(double gain = 1.4142135623730951);
Init kaiming_uniform(double gain = 1.4142135623730951);
/// Glorot init: std = gain·√(2/(fan_in+fan_out)) or bound = gain·√(6/(fan_in+fan_out)).
Init xavier_normal(double gain = 1.0);
Init xavier_uniform(double gain = 1.0);
Init callable(std::function<void(std::span<float> values, const Shape& shape, uint64_t seed)> fn);
}  // namespace init

class Param;

class Module {
 public:
  /// A root module (a whole model).
  Module();
  /// A child module named `name` inside `parent` (names may contain dots: "layers.0").
  Module(Module& parent, std::string name);
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// Dotted path from the root ("" for the root).
  std::string path() const;
  /// Every parameter in this module and below, in declaration order.
  std::vector<const Param*> parameters() const;
  /// This module and every module below it, parents before children, in declaration order
  /// (nn::add_lora walks it to find the Linears to adapt).
  std::vector<Module*> modules();
  const Module& root() const;

  /// Stores every parameter of rank ≥ 2 in this module and below (the products' weights,
  /// embeddings, convolution kernels, and any other matrix such as Mamba's A_log) as `dtype`:
  /// DType::kBF16 or kF16 (half the memory of f32), or kF32 again. Vectors (biases, norms' gains) stay f32. A
  /// half-stored parameter reads as its f32 value (exact), and the precision policy's products read the
  /// stored bf16 or f16 value itself, with no copy; a training program must leave it frozen. Call it before
  /// the first program of the model is compiled (else an Error). See Param::set_dtype.
  ///
  /// DType::kI8 quantizes the weights of every nn::Linear to 8 bits (Param::quantize_int8, in groups of
  /// `group` values of each row; tensorgrad/quantize.h) and holds the other matrices (embeddings, tied
  /// heads, convolutions, experts, and a Linear whose input width `group` does not divide, such as
  /// Mamba's dt_proj) as bf16: about a quarter of the f32 memory for a transformer. With `bits`
  /// 4 the Linears' weights are quantized to 4 bits instead (Param::quantize_int4: codes packed two
  /// to a byte with a scale and an offset per group), about 0.75 bytes a weight at groups of 32.
  /// A weight quantized already (Param::quantize_int8 or quantize_int4) keeps its form, so that
  /// chosen Linears can be given 8 bits and the rest 4.
  void store_params_as(DType dtype, int64_t group = 32, int bits = 8);

  /// Internal: the root's per-device parameter storage.
  std::shared_ptr<detail::ModelStorage> storage() const;

 private:
  friend class Param;
  void collect(std::vector<const Param*>& out) const;
  Module* parent_ = nullptr;
  std::string name_;
  // Children and parameters in declaration order (members construct in that order).
  // Each entry is a Module or a Param: they interleave, and the order is the naming order.
  struct Entry {
    Module* module = nullptr;
    const Param* param = nullptr;
  };
  std::vector<Entry> entries_;
  std::shared_ptr<detail::ModelStorage> storage_;  // root only
};

struct ParamOptions {
  /// Whether AdamW/SGD weight decay applies. Default: yes for rank ≥ 2 parameters that are
  /// not initialised to a constant; no for biases, norms' gains and other vectors.
  std::optional<bool> decay = {};
};

class Param {
 public:
  Param(Module& owner, std::string name, Shape shape, Init init = init::normal(0.02),
        ParamOptions options = {});
  ~Param();
  Param(const Param&) = delete;
  Param& operator=(const Param&) = delete;

  /// The parameter as a tensor of the program being traced.
  operator Tensor() const;  // NOLINT: implicit by design, so params read like tensors
  Tensor tensor(Loc loc = Loc::current()) const;

  std::string path() const;  // "l1.weight"
  const Shape& shape() const { return shape_; }
  /// How the value is stored on every device: f32 (the default), or bf16 or f16 for weights
  /// only read (inference, frozen base weights under LoRA). Traced, a half-stored parameter
  /// is its stored value cast to f32; under Precision::kBf16 (kF16) a product reads the
  /// stored value directly. Uploads round f32 values to it; downloads return it.
  DType dtype() const { return dtype_; }
  /// Sets dtype(): kF32, kBF16 or kF16, before the first program of the model is compiled
  /// (the storage is allocated then); afterwards, or another dtype, is an Error.
  void set_dtype(DType dtype);
  /// Stores the parameter (rank ≥ 2) as int8 with one f32 scale per `group` consecutive values of
  /// its last axis, which `group` must divide: dtype() becomes kI8 and a parameter "<name>_scale"
  /// of shape [..., K / group] joins the owner (tensorgrad/quantize.h has the arithmetic). Traced,
  /// the parameter reads as q · scale in f32, computed in every run (never held: that copy is what
  /// the quantization saves); both must stay frozen in training. Uploading an f32, bf16 or f16
  /// value quantizes it and writes the scales; downloads return the i8 values and the scales.
  /// Before the first program of the model is compiled, as set_dtype.
  void quantize_int8(int64_t group = 32);
  /// Stores the parameter (rank ≥ 2) as 4-bit codes packed two to a byte, with one f32 scale and
  /// one f32 offset per `group` consecutive values of its last axis (`group` even, dividing it):
  /// dtype() becomes kI8, bits() 4, stored_shape() [..., K / 2], and parameters "<name>_scale" and
  /// "<name>_offset" of shape [..., K / group] join the owner (tensorgrad/quantize.h). Read, frozen,
  /// uploaded and downloaded as quantize_int8's (downloads give the packed bytes).
  void quantize_int4(int64_t group = 32);
  /// The values per scale of a quantized parameter (0 for any other).
  int64_t group() const { return group_; }
  /// A quantized parameter's bits a value: 8 or 4 (0 for any other).
  int bits() const { return bits_; }
  /// The shape of the stored values: shape(), except for 4 bits ([..., K / 2] bytes).
  Shape stored_shape() const;
  /// A quantized parameter's scales ("<name>_scale"), else nullptr.
  const Param* scale() const { return scale_.get(); }
  /// A 4-bit parameter's offsets ("<name>_offset"), else nullptr.
  const Param* offset() const { return offset_.get(); }
  /// For a scale or offset parameter: the quantized parameter it belongs to, else nullptr.
  const Param* scales() const { return scales_; }
  const Init& init() const { return init_; }
  bool decay() const { return decay_; }

 private:
  void check_unallocated(const char* what) const;
  void quantize(int64_t group, int bits);
  Module* owner_;
  std::string name_;
  Shape shape_;
  Init init_;
  bool decay_;
  DType dtype_ = DType::kF32;
  int64_t group_ = 0;
  int bits_ = 0;
  std::unique_ptr<Param> scale_, offset_;
  const Param* scales_ = nullptr;
};

}  // namespace tg
