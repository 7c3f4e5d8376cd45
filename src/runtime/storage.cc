// Devices, backends and the per-model parameter storage shared across programs.
#include "runtime/storage.h"

#include "backend/cuda/cublaslt.h"
#include "backend/cuda/driver.h"

#include <vector>

namespace tg {

/// cuda:0 when the driver, a GPU, NVRTC and cuBLASLt all load; decided once per process.
Device Device::best() {
  static const bool gpu = [] {
    if (!backend::cuda::unavailable_reason(0).empty() || !backend::cuda::cublaslt_unavailable_reason().empty()) return false;
    try {
      backend::cuda::nvrtc();
      return true;
    } catch (const DeviceError&) {
      return false;
    }
  }();
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
      std::string why = backend::cuda::unavailable_reason(device.index);
      if (why.empty()) why = backend::cuda::cublaslt_unavailable_reason();
      if (why.empty()) {
        try {
          backend::cuda::nvrtc();
          return backend::make_cuda_backend(device.index);
        } catch (const DeviceError& e) {
          why = e.what();
        }
      }
      throw DeviceError("[compile] device " + device.str() + " is not available: " + why + "; use Device::cpu()");
    }
  }
  throw DeviceError("[compile] unknown device");
}

void DeviceStore::init_params(uint64_t seed) {
  for (auto& [path, info] : infos) {
    std::vector<float> host(static_cast<size_t>(numel(info.shape)));
    fill_init(info.init, host, info.shape, seed, path);
    backend->upload(*buffers.at(path), host.data());
  }
}

std::shared_ptr<DeviceStore> device_store(const Module& model, const Device& device) {
  std::shared_ptr<ModelStorage> storage = model.storage();
  std::lock_guard lock(storage->mutex);
  std::shared_ptr<DeviceStore>& store = storage->devices[device.str()];
  if (store) {
    // Parameters declared after the first compile (a new head, say) join the store here.
    std::lock_guard store_lock(store->mutex);
    for (const Param* p : model.root().parameters()) {
      const std::string path = p->path();
      if (store->infos.count(path) != 0) continue;
      store->infos[path] = {path, p->shape(), p->init(), p->decay()};
      store->buffers[path] = store->backend->allocate(DType::kF32, numel(p->shape()));
      std::vector<float> host(static_cast<size_t>(numel(p->shape())));
      fill_init(p->init(), host, p->shape(), 0, path);
      store->backend->upload(*store->buffers[path], host.data());
    }
    return store;
  }
  auto fresh = std::make_shared<DeviceStore>();
  fresh->device = device;
  fresh->backend = make_backend(device);
  for (const Param* p : model.root().parameters()) {
    const std::string path = p->path();
    if (fresh->infos.count(path) != 0) throw Error("[Module] two parameters are both named '" + path + "'");
    fresh->infos[path] = {path, p->shape(), p->init(), p->decay()};
    fresh->buffers[path] = fresh->backend->allocate(DType::kF32, numel(p->shape()));
  }
  fresh->init_params(0);
  store = fresh;
  return store;
}

}  // namespace detail
}  // namespace tg
