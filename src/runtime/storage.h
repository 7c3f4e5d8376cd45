// Parameter storage shared by every program compiled from one model on one device.
// The root Module owns a ModelStorage; each device gets one DeviceStore holding the
// backend and one persistent buffer per parameter. Its mutex serializes every call on
// every program that shares it, so a step never interleaves with a run reading the same
// parameters.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "backend/backend.h"
#include "nn/init.h"
#include "tensorgrad/module.h"
#include "tensorgrad/program.h"

namespace tg::detail {

/// What the store remembers of a Param (the Module may be destroyed before its programs).
struct ParamInfo {
  std::string path;
  Shape shape;   // Param::shape(): the values' (a quantized parameter's dequantized) shape
  Shape stored;  // Param::stored_shape(): the buffer's (a 4-bit parameter's packed bytes)
  Init init;
  bool decay;
  DType dtype = DType::kF32;  // Param::dtype(): how its buffer stores it
  int64_t group = 0;          // Param::group(): values per scale of an i8 parameter
  int bits = 0;               // Param::bits(): 8 or 4 for an i8 parameter
  std::string scale;          // an i8 parameter's scales (Param::scale()), else empty
  std::string offset;         // a 4-bit parameter's offsets (Param::offset()), else empty
  std::string scales;         // a scale or offset parameter's i8 parameter (Param::scales()), else empty
};

/// What the store keeps of `p`.
ParamInfo param_info(const Param& p);

struct DeviceStore {
  Device device;
  std::unique_ptr<backend::Backend> backend;
  std::map<std::string, ParamInfo> infos;
  std::map<std::string, std::unique_ptr<backend::Buffer>> buffers;
  /// tg::state() tensors by name, shared by the programs of this model on this device.
  std::map<std::string, std::unique_ptr<backend::Buffer>> states;
  std::map<std::string, Shape> state_shapes;
  std::map<std::string, double> state_initial;  // every element's value at first and after reset_state()
  /// Inference programs' values computed from parameters alone (a weight's bf16 copy), by their
  /// expression (passes/hoist.h): programs computing the same value share one buffer.
  std::map<std::string, std::unique_ptr<backend::Buffer>> hoisted;
  std::mutex mutex;
  /// Advanced by everything that writes parameters (training steps, uploads, init_params):
  /// inference programs recompute their hoisted values (passes/hoist.h) when it moved.
  uint64_t version = 1;

  /// Sets state `name` to its initial value.
  void reset_state(const std::string& name);

  /// Bytes of every buffer held here: parameters, hoisted values and states (takes the mutex).
  int64_t bytes();

  /// Writes f32 `values` into parameter `path`'s buffer: rounded when it stores bf16 or f16,
  /// quantized when it stores i8 (its scale parameter's buffer written too).
  void upload_f32(const std::string& path, std::span<const float> values);

  /// Program::upload_params: checks every value against its parameter, then writes them all.
  void upload(const std::map<std::string, HostTensor>& params, bool partial);

  /// Fills every parameter from its Init with `seed` (see nn/init.cc).
  void init_params(uint64_t seed);
};

struct ModelStorage {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<DeviceStore>> devices;  // by Device::str()
};

/// The store of `model` on `device`, created (with every parameter of the model allocated
/// and initialised with seed 0) on first use.
std::shared_ptr<DeviceStore> device_store(const Module& model, const Device& device);

std::unique_ptr<backend::Backend> make_backend(const Device& device);

}  // namespace tg::detail
