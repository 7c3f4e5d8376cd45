// The CPU backend: persistent buffers as zero-filled host memory; prepare() hands the graph
// to the planner (executable.h).
#include <cstring>

#include "backend/backend.h"
#include "backend/cpu/executable.h"
#include "tensorgrad/errors.h"

namespace tg::backend {
namespace cpu {
namespace {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  bool supports(ir::Op) const override { return true; }
  std::unique_ptr<Buffer> allocate(DType dtype, int64_t numel) override {
    if (numel < 0) throw Error("[cpu] allocate: negative element count " + std::to_string(numel));
    return std::make_unique<CpuBuffer>(dtype, numel);
  }
  void upload(Buffer& buffer, const void* host) override {
    HostMem& mem = cpu_buffer(buffer).mem;
    if (buffer.dtype() == DType::kBool) {
      const auto* src = static_cast<const uint8_t*>(host);
      auto* dst = reinterpret_cast<uint8_t*>(mem.data());
      for (int64_t i = 0; i < buffer.numel(); ++i) dst[i] = src[i] != 0 ? 1 : 0;
    } else if (mem.bytes() > 0) {
      std::memcpy(mem.data(), host, static_cast<size_t>(mem.bytes()));
    }
  }
  void download(const Buffer& buffer, void* host) override {
    const HostMem& mem = cpu_buffer(const_cast<Buffer&>(buffer)).mem;
    if (mem.bytes() > 0) std::memcpy(host, mem.data(), static_cast<size_t>(mem.bytes()));
  }
  std::unique_ptr<Executable> prepare(const ir::Graph& graph, const Bindings& bindings,
                                      const PrepareOptions& options) override {
    return std::make_unique<CpuExecutable>(graph, bindings, options);
  }

 private:
  static CpuBuffer& cpu_buffer(Buffer& buffer) {
    auto* b = dynamic_cast<CpuBuffer*>(&buffer);
    if (!b) throw Error("[cpu] buffer was not allocated by the cpu backend");
    return *b;
  }
};

}  // namespace
}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<cpu::CpuBackend>(); }

}  // namespace tg::backend
