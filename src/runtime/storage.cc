// Devices, backends and the per-model parameter storage shared across programs.
#include "runtime/storage.h"
#include "tensorgrad/errors.h"
#include "tensorgrad/quantize.h"
#include "util/switches.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

namespace tg {

/// cuda:0 when the driver, a GPU, NVRTC and cuBLASLt all load; decided once per process.
Device Device::best() {
  static const bool gpu = backend::cuda_unavailable_reason(0).empty();
  return gpu ? cuda(0) : cpu();
}

std::string Device::str() const {
  switch (kind) {
    case Kind::kCpu: return "cpu";
    case Kind::kRef: return "ref";
    case Kind::kCuda: return "cuda:" + std::to_string(index);
  }
  return "?";
}

namespace detail {

std::unique_ptr<backend::Backend> make_backend(const Device& device) {
  switch (device.kind) {
    case Device::Kind::kCpu: return backend::make_cpu_backend();
    case Device::Kind::kRef: return backend::make_ref_backend();
    case Device::Kind::kCuda: {
      std::string why = backend::cuda_unavailable_reason(device.index);
      if (why.empty()) {
        try {
          return backend::make_cuda_backend(device.index);
        } catch (const DeviceError& e) {
          why = e.what();
        }
      }
      throw DeviceError("[compile] device " + device.str() + " is not available: " + why +
                        "; use Device::cpu()");
    }
  }
  throw DeviceError("[compile] unknown device");
}

void DeviceStore::init_params(uint64_t seed) {
  // One host buffer for every parameter, left uninitialised (fill_init writes every value,
  // zeroing first for a callable): a zeroed vector per parameter would zero and page-fault
  // all of GPT-2's 500 MB on one thread before filling it.
  size_t largest = 0;
  for (const auto& [path, info] : infos) largest = std::max(largest, static_cast<size_t>(numel(info.shape)));
  const std::unique_ptr<float[]> host(new float[largest]);
  double fill_s = 0, upload_s = 0;
  for (auto& [path, info] : infos) {
    if (!info.scales.empty()) continue;  // written with the i8 parameter it scales
    const std::span<float> values(host.get(), static_cast<size_t>(numel(info.shape)));
    const auto t0 = std::chrono::steady_clock::now();
    fill_init(info.init, values, info.shape, seed, path);
    const auto t1 = std::chrono::steady_clock::now();
    upload_f32(path, values);
    fill_s += std::chrono::duration<double>(t1 - t0).count();
    upload_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  }
  if (env::is_set(env::Switch::kProfile))
    std::fprintf(stderr, "[compile]     fill %.1f ms, upload %.1f ms\n", fill_s * 1e3, upload_s * 1e3);
}

int64_t DeviceStore::bytes() {
  std::lock_guard lock(mutex);
  int64_t total = 0;
  for (const auto* held : {&buffers, &hoisted, &states})
    for (const auto& [name, buf] : *held) total += buf->numel() * dtype_size(buf->dtype());
  return total;
}

void DeviceStore::upload_f32(const std::string& path, std::span<const float> values) {
  backend::Buffer& buf = *buffers.at(path);
  if (buf.dtype() == DType::kF32) return backend->upload(buf, values.data());
  if (buf.dtype() == DType::kI8) {
    const ParamInfo& info = infos.at(path);
    std::vector<int8_t> q(info.bits == 4 ? values.size() / 2 : values.size());
    std::vector<float> scale(values.size() / static_cast<size_t>(info.group)), offset;
    if (info.bits == 4) {
      offset.resize(scale.size());
      quantize_int4(values, info.group, reinterpret_cast<uint8_t*>(q.data()), scale.data(), offset.data());
      backend->upload(*buffers.at(info.offset), offset.data());
    } else {
      quantize_int8(values, info.group, q.data(), scale.data());
    }
    backend->upload(buf, q.data());
    return backend->upload(*buffers.at(info.scale), scale.data());
  }
  std::vector<uint16_t> half(values.size());  // a half-stored parameter: rounded to nearest even
  for (size_t i = 0; i < values.size(); ++i)
    half[i] = buf.dtype() == DType::kBF16 ? bf16_from_f32(values[i]) : f16_from_f32(values[i]);
  backend->upload(buf, half.data());
}

ParamInfo param_info(const Param& p) {
  return {p.path(),
          p.shape(),
          p.stored_shape(),
          p.init(),
          p.decay(),
          p.dtype(),
          p.group(),
          p.bits(),
          p.scale() != nullptr ? p.scale()->path() : std::string(),
          p.offset() != nullptr ? p.offset()->path() : std::string(),
          p.scales() != nullptr ? p.scales()->path() : std::string()};
}

void DeviceStore::upload(const std::map<std::string, HostTensor>& params, bool partial) {
  for (const auto& [name, value] : params) {
    auto it = infos.find(name);
    if (it == infos.end()) {
      std::string known;
      for (const auto& kv : infos) known += (known.empty() ? "" : ", ") + kv.first;
      throw InputError("[upload_params] unknown parameter '" + name +
                       "'; the model's parameters are: " + known);
    }
    const ParamInfo& info = it->second;
    const bool as_stored = value.dtype() == DType::kI8 && info.dtype == DType::kI8;
    const bool convertible = value.dtype() == DType::kBF16 || value.dtype() == DType::kF16 || as_stored;
    if ((value.dtype() != DType::kF32 && !convertible) ||
        value.shape() != (as_stored ? info.stored : info.shape))
      throw InputError("[upload_params] parameter '" + name + "' expects " + dtype_name(info.dtype) +
                       shape_str(info.stored) + ", got " + dtype_name(value.dtype()) +
                       shape_str(value.shape()) + " (f32, bf16 and f16 values are converted" +
                       (info.dtype == DType::kI8
                            ? ", and quantized with their scales, given as " + shape_str(info.shape) +
                                  (info.bits == 4 ? "; i8 values are the 4-bit codes, two a byte" : "")
                            : std::string()) +
                       ")");
    if (const auto w = info.scales.empty() ? params.end() : params.find(info.scales);
        w != params.end() && w->second.dtype() != DType::kI8)
      throw InputError("[upload_params] '" + name + "' holds the scales or offsets that quantizing the " +
                       dtype_name(w->second.dtype()) + " value given for '" + info.scales +
                       "' computes: give that value, or its i8 values with their scales");
  }
  // An i8 parameter given as floats is quantized here, which writes its scales.
  const auto quantized_here = [&](const ParamInfo& info) {
    const auto w = info.scales.empty() ? params.end() : params.find(info.scales);
    return w != params.end() && w->second.dtype() != DType::kI8;
  };
  if (!partial)
    for (const auto& [name, info] : infos)
      if (params.count(name) == 0 && !quantized_here(info))
        throw InputError("[upload_params] missing parameter '" + name +
                         "' (pass {.partial = true} to upload a subset)");
  ++version;
  for (const auto& [name, value] : params) {
    const DType stored = infos.at(name).dtype;  // f32, a half type, or i8 (quantized: 8 or 4 bits)
    if (stored == DType::kI8 && value.dtype() != DType::kI8)
      upload_f32(name, value.to(DType::kF32).f32());
    else
      backend->upload(*buffers.at(name), value.dtype() == stored ? value.data() : value.to(stored).data());
  }
}

std::shared_ptr<ModelStorage> make_model_storage() { return std::make_shared<ModelStorage>(); }

std::shared_ptr<DeviceStore> device_store(const Module& model, const Device& device) {
  std::shared_ptr<ModelStorage> storage = model.storage();
  std::lock_guard lock(storage->mutex);
  std::shared_ptr<DeviceStore>& store = storage->devices[device.str()];
  if (store) {
    // Parameters declared after the first compile (a new head, say) join the store here
    // (allocated first, then filled: an i8 parameter's fill writes its scales too).
    std::lock_guard store_lock(store->mutex);
    std::vector<const Param*> fresh;
    for (const Param* p : model.root().parameters()) {
      const std::string path = p->path();
      if (store->infos.count(path) != 0) continue;
      store->infos[path] = param_info(*p);
      store->buffers[path] = store->backend->allocate(p->dtype(), numel(p->stored_shape()));
      fresh.push_back(p);
    }
    for (const Param* p : fresh) {
      if (p->scales() != nullptr) continue;
      std::vector<float> host(static_cast<size_t>(numel(p->shape())));
      fill_init(p->init(), host, p->shape(), 0, p->path());
      store->upload_f32(p->path(), host);
      ++store->version;
    }
    return store;
  }
  const bool profile = env::is_set(env::Switch::kProfile);
  auto t0 = std::chrono::steady_clock::now();
  auto mark = [&](const char* stage) {  // TG_PROFILE: the store's share of the first compile
    if (!profile) return;
    const auto now = std::chrono::steady_clock::now();
    std::fprintf(stderr, "[compile]   %-20s %8.1f ms\n", stage,
                 std::chrono::duration<double, std::milli>(now - t0).count());
    t0 = now;
  };
  auto fresh = std::make_shared<DeviceStore>();
  fresh->device = device;
  fresh->backend = make_backend(device);
  mark("make backend");
  for (const Param* p : model.root().parameters()) {
    const std::string path = p->path();
    if (fresh->infos.count(path) != 0) throw Error("[Module] two parameters are both named '" + path + "'");
    fresh->infos[path] = param_info(*p);
    fresh->buffers[path] = fresh->backend->allocate(p->dtype(), numel(p->stored_shape()));
  }
  mark("allocate params");
  fresh->init_params(0);
  mark("init params");
  store = fresh;
  return store;
}

void DeviceStore::reset_state(const std::string& name) {
  backend::Buffer& buf = *states.at(name);
  const double v = state_initial.at(name);
  HostTensor h(buf.dtype(), state_shapes.at(name));  // zeros
  if (v != 0.0) {
    for (int64_t i = 0; i < buf.numel(); ++i) {
      if (buf.dtype() == DType::kF32) static_cast<float*>(h.data())[i] = static_cast<float>(v);
      if (buf.dtype() == DType::kI32) static_cast<int32_t*>(h.data())[i] = static_cast<int32_t>(v);
      if (buf.dtype() == DType::kBool) static_cast<uint8_t*>(h.data())[i] = 1;
    }
  }
  backend->upload(buf, h.data());
}

}  // namespace detail
}  // namespace tg
