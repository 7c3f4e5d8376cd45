// Module tree bookkeeping and Param → Tensor conversion during tracing.
#include <algorithm>

#include "ir/api_util.h"
#include "ir/trace.h"
#include "runtime/storage.h"
#include "tensorgrad/module.h"

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

void Module::store_params_as(DType dtype) {
  // Params are members of the (non-const) modules that declare them.
  for (const Param* p : parameters())
    if (p->shape().size() >= 2) const_cast<Param*>(p)->set_dtype(dtype);
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

void Param::set_dtype(DType dtype) {
  if (dtype != DType::kF32 && !is_half(dtype))
    throw Error("[Param] '" + path() + "': parameters are stored as f32, bf16 or f16, not " +
                dtype_name(dtype));
  if (dtype == dtype_) return;
  const std::shared_ptr<detail::ModelStorage> storage = owner_->storage();
  std::lock_guard lock(storage->mutex);
  if (!storage->devices.empty())
    throw Error("[Param] '" + path() +
                "': set the storage dtype before the first program of the model is "
                "compiled (its parameters are allocated then)");
  dtype_ = dtype;
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
    const Tensor leaf = ir::named_leaf(trace->graph, ir::Op::kParam, path(), shape_, dtype_, loc);
    it = trace->param_nodes.emplace(this, leaf.id()).first;
    trace->params.push_back(this);
    if (dtype_ != DType::kF32) trace->param_reads[this] = cast(leaf, DType::kF32, loc).id();
  }
  const auto read = trace->param_reads.find(this);
  return Tensor(&trace->graph, read != trace->param_reads.end() ? read->second : it->second);
}

}  // namespace tg
