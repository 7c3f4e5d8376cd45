// Module tree bookkeeping and Param → Tensor conversion during tracing.
#include <algorithm>
#include <set>

#include "ir/api_util.h"
#include "ir/trace.h"
#include "runtime/storage.h"
#include "nn/init.h"
#include "tensorgrad/module.h"
#include "tensorgrad/nn.h"
#include "tensorgrad/quantize.h"

namespace tg {

Module::Module() : storage_(detail::make_model_storage()) {}

Module::Module(Module& parent, std::string name) : parent_(&parent), name_(std::move(name)) {
  if (name_.empty()) throw Error("[Module] a child module needs a name");
  parent.entries_.push_back({this, nullptr});
}

Module::~Module() {
  if (parent_ == nullptr) return;
  auto& e = parent_->entries_;
  e.erase(std::remove_if(e.begin(), e.end(), [&](const Entry& x) { return x.module == this; }), e.end());
}

std::string Module::path() const {
  if (parent_ == nullptr) return "";
  std::string p = parent_->path();
  return p.empty() ? name_ : p + "." + name_;
}

const Module& Module::root() const { return parent_ == nullptr ? *this : parent_->root(); }

std::shared_ptr<detail::ModelStorage> Module::storage() const { return root().storage_; }

void Module::collect(std::vector<const Param*>& out) const {
  for (const Entry& e : entries_) {
    if (e.param != nullptr)
      out.push_back(e.param);
    else
      e.module->collect(out);
  }
}

std::vector<Module*> Module::modules() {
  std::vector<Module*> out{this};
  for (const Entry& e : entries_)
    if (e.module != nullptr) {
      const std::vector<Module*> below = e.module->modules();
      out.insert(out.end(), below.begin(), below.end());
    }
  return out;
}

void Module::store_params_as(DType dtype, int64_t group, int bits) {
  if (bits != 8 && bits != 4)
    throw Error("[Module] store_params_as: quantized weights take 8 or 4 bits, not " + std::to_string(bits));
  if (bits == 4 && dtype != DType::kI8)
    throw Error(std::string("[Module] store_params_as: 4 bits are a quantization, DType::kI8, not ") +
                dtype_name(dtype));
  if (dtype == DType::kI8) {
    // The Linears' weights are quantized where the group divides their rows (not Mamba's
    // narrow dt_proj, say) and they are not a mixture's experts; every other matrix is held as bf16.
    if (group <= 0)
      throw Error("[Module] store_params_as(kI8): the group must be positive, not " + std::to_string(group));
    if (bits == 4 && group % 2 != 0)
      throw Error("[Module] store_params_as(kI8, 4 bits): the group must be even, not " +
                  std::to_string(group));
    // A mixture's experts are stacked per layer for grouped_matmul (LlamaMoe): held as bf16.
    std::set<const Module*> experts;
    for (Module* m : modules())
      if (auto* moe = dynamic_cast<nn::LlamaMoe*>(m))
        for (const auto& e : moe->experts)
          for (Module* sub : e->modules()) experts.insert(sub);
    // A weight quantized already (Param::quantize_int8 or quantize_int4) keeps its form.
    for (Module* m : modules())
      if (auto* linear = dynamic_cast<nn::Linear*>(m);
          linear != nullptr && linear->in_features % group == 0 && experts.count(m) == 0 &&
          linear->weight.dtype() != DType::kI8)
        bits == 4 ? linear->weight.quantize_int4(group) : linear->weight.quantize_int8(group);
    dtype = DType::kBF16;
  }
  // Params are members of the (non-const) modules that declare them.
  for (const Param* p : parameters())
    if (p->shape().size() >= 2 && p->dtype() != DType::kI8 && p->scales() == nullptr)
      const_cast<Param*>(p)->set_dtype(dtype);
}

std::vector<const Param*> Module::parameters() const {
  std::vector<const Param*> out;
  collect(out);
  return out;
}

namespace {
bool default_decay(const Shape& shape, const Init& init) {
  return shape.size() >= 2 && init.kind != Init::Kind::kConstant;
}
}  // namespace

Param::Param(Module& owner, std::string name, Shape shape, Init init, ParamOptions options)
    : owner_(&owner),
      name_(std::move(name)),
      shape_(std::move(shape)),
      init_(std::move(init)),
      decay_(options.decay.value_or(default_decay(shape_, init_))) {
  if (name_.empty()) throw Error("[Param] a parameter needs a name");
  int64_t count = 1;
  for (int64_t d : shape_) {
    if (d <= 0) throw ShapeError("[Param] '" + name_ + "' has a non-positive extent in " + shape_str(shape_));
    // Byte counts (numel · 4) must fit in int64 with room to spare, as for every graph value.
    if (count > (int64_t{1} << 56) / d)
      throw ShapeError("[Param] '" + name_ + "' has shape " + shape_str(shape_) +
                       ": more than 2^56 elements, too large to allocate");
    count *= d;
  }
  owner.entries_.push_back({nullptr, this});
}

Param::~Param() {
  auto& e = owner_->entries_;
  e.erase(std::remove_if(e.begin(), e.end(), [&](const Module::Entry& x) { return x.param == this; }),
          e.end());
}

std::string Param::path() const {
  std::string p = owner_->path();
  return p.empty() ? name_ : p + "." + name_;
}

void Param::check_unallocated(const char* what) const {
  const std::shared_ptr<detail::ModelStorage> storage = owner_->storage();
  std::lock_guard lock(storage->mutex);
  if (!storage->devices.empty())
    throw Error("[Param] '" + path() + "': " + what +
                " before the first program of the model is compiled (its parameters are allocated then)");
}

void Param::set_dtype(DType dtype) {
  if (dtype != DType::kF32 && !is_half(dtype))
    throw Error(
        "[Param] '" + path() + "': parameters are stored as f32, bf16 or f16, not " + dtype_name(dtype) +
        (dtype == DType::kI8 ? " (Param::quantize_int8 and quantize_int4 store one as i8 with its scales)"
                             : ""));
  if (dtype == dtype_) return;
  if (scales_ != nullptr)
    throw Error("[Param] '" + path() + "' holds the scales of a quantized parameter: f32");
  check_unallocated("set the storage dtype");
  if (dtype_ == DType::kI8)
    throw Error("[Param] '" + path() + "' is quantized to i8: its storage type is fixed");
  dtype_ = dtype;
}

void Param::quantize(int64_t group, int bits) {
  if (dtype_ == DType::kI8 && group == group_ && bits == bits_) return;
  if (bits == 4 && shape_.size() >= 2 && shape_.back() % 2 != 0)
    throw Error("[Param] '" + path() + "' " + shape_str(shape_) +
                ": 4 bits pack two values a byte, so the last axis must be even");
  if (shape_.size() < 2 || group <= 0 || shape_.back() % group != 0 || (bits == 4 && group % 2 != 0))
    throw Error("[Param] '" + path() + "' " + shape_str(shape_) +
                ": quantization takes a matrix whose last axis " + "groups of " + std::to_string(group) +
                " values divide (pick a" + (bits == 4 ? "n even" : "") + " group that divides " +
                std::to_string(shape_.back()) + ")");
  check_unallocated("quantize a parameter");
  if (scales_ != nullptr) throw Error("[Param] '" + path() + "' holds the scales of a quantized parameter");
  if (dtype_ == DType::kI8)
    throw Error("[Param] '" + path() + "' is quantized already, to " + std::to_string(bits_) +
                " bits in groups of " + std::to_string(group_));
  Shape scale_shape = shape_;
  scale_shape.back() /= group;
  const auto beside = [&](const std::string& name) {
    auto p = std::make_unique<Param>(*owner_, name, scale_shape, init::constant(0.0),
                                     ParamOptions{.decay = false});
    p->scales_ = this;
    return p;
  };
  scale_ = beside(scale_name(name_));
  if (bits == 4) offset_ = beside(offset_name(name_));
  dtype_ = DType::kI8;
  group_ = group;
  bits_ = bits;
}

void Param::quantize_int8(int64_t group) { quantize(group, 8); }
void Param::quantize_int4(int64_t group) { quantize(group, 4); }

Shape Param::stored_shape() const {
  Shape s = shape_;
  if (bits_ == 4) s.back() /= 2;
  return s;
}

Param::operator Tensor() const { return tensor(); }

Tensor Param::tensor(Loc loc) const {
  ir::Trace* trace = ir::current_trace();
  if (trace == nullptr)
    throw Error("[Param] '" + path() + "' used outside of compile_train/compile_forward (at " +
                ir::loc_str(loc) + ")");
  // A half-stored parameter reads as its f32 value (cast once per trace); a product under the
  // precision policy casts that back to the stored type, which cast() folds to the leaf itself.
  auto it = trace->param_nodes.find(this);
  if (it == trace->param_nodes.end()) {
    const Tensor leaf = ir::named_leaf(trace->graph, ir::Op::kParam, path(), stored_shape(), dtype_, loc);
    it = trace->param_nodes.emplace(this, leaf.id()).first;
    trace->params.push_back(this);
    if (dtype_ == DType::kI8) {
      // q [..., K] · scale [..., K/G] as [..., K/G, G] · [..., K/G, 1], back to [..., K]; 4 bits:
      // codes [..., K/G, G] unpacked from the leaf's bytes (passes/weights.cc matches this form).
      Shape grouped = shape_, per_group = scale_->shape();
      grouped.back() /= group_;
      grouped.push_back(group_);
      per_group.push_back(1);
      const Tensor values = ir::quantized_values(leaf, grouped, bits_, loc);
      Tensor w = mul(values, reshape(scale_->tensor(loc), per_group, loc), loc);
      if (bits_ == 4) w = add(w, reshape(offset_->tensor(loc), per_group, loc), loc);
      trace->param_reads[this] = reshape(w, shape_, loc).id();
    } else if (dtype_ != DType::kF32) {
      trace->param_reads[this] = cast(leaf, DType::kF32, loc).id();
    }
  }
  // (Found again: tracing the scales above may have rehashed param_nodes.)
  const auto read = trace->param_reads.find(this);
  return Tensor(&trace->graph, read != trace->param_reads.end() ? read->second : trace->param_nodes.at(this));
}

}  // namespace tg
