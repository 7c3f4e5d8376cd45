// Devices, backends and the per-model parameter storage shared across programs.
#include "runtime/storage.h"

#include "backend/cuda/driver.h"

#include <vector>

namespace tg {

Device Device::best() { return cpu(); }  // the CUDA backend joins here when it exists

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
      // The driver and NVRTC load and compile (backend/cuda/driver.h); the backend that runs
      // whole programs on them is the next step. Say precisely which part is missing.
      const std::string why = backend::cuda::unavailable_reason(device.index);
      throw DeviceError("[compile] device " + device.str() + " is not available: " +
                        (why.empty() ? std::string("the GPU works, but this build's CUDA backend cannot run programs yet")
                                     : why) +
                        "; use Device::cpu()");
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
