// The CUDA backend: persistent buffers in device memory and executables that replay one CUDA
// graph per step (executable.h). Everything CUDA is loaded at run time (driver.h, cublaslt.h).
#include <memory>

#include "backend/backend.h"
#include "backend/cuda/executable.h"
#include "tensorgrad/errors.h"

namespace tg::backend {
namespace {

using cuda::CudaBuffer;
using cuda::CudaContext;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index) : ctx_(std::make_shared<CudaContext>()) {
    ctx_->info = cuda::open_device(index);
    if (const std::string why = cuda::cublaslt_unavailable_reason(); !why.empty())
      throw DeviceError("[cuda] device cuda:" + std::to_string(index) + " is unusable: " + why);
    // The steps run on `stream` at the greatest priority; steps off the critical path (an
    // executable's side steps) on `side` at the least, so that the block scheduler serves
    // them only where the main chain leaves an SM free.
    constexpr unsigned kNonBlocking = 1;  // CU_STREAM_NON_BLOCKING
    const cuda::Driver& d = cuda::driver();
    int least = 0, greatest = 0;
    cuda::check(d.cuCtxGetStreamPriorityRange(&least, &greatest), "cuCtxGetStreamPriorityRange");
    cuda::check(d.cuStreamCreateWithPriority(&ctx_->stream, kNonBlocking, greatest),
                "cuStreamCreateWithPriority");
    cuda::check(d.cuStreamCreateWithPriority(&ctx_->side, kNonBlocking, least), "cuStreamCreateWithPriority");
    cuda::check(d.cuStreamCreateWithPriority(&ctx_->comm, kNonBlocking, greatest),
                "cuStreamCreateWithPriority");
  }
  ~CudaBackend() override {
    ctx_->make_current();
    cuda::driver().cuStreamSynchronize(ctx_->stream);
    cuda::driver().cuStreamSynchronize(ctx_->side);
    cuda::driver().cuStreamSynchronize(ctx_->comm);
  }
  const char* name() const override { return "cuda"; }
  bool supports(ir::Op) const override { return true; }
  std::unique_ptr<Buffer> allocate(DType dtype, int64_t numel) override {
    ctx_->make_current();
    auto b = std::make_unique<CudaBuffer>(dtype, numel);
    cuda::check(cuda::driver().cuMemsetD8Async(b->mem.get(), 0, b->mem.bytes(), ctx_->stream),
                "cuMemsetD8Async");
    sync();
    return b;
  }
  void upload(Buffer& buffer, const void* host) override {
    sync();  // a step in flight may still use the buffer
    static_cast<CudaBuffer&>(buffer).mem.upload(
        host, static_cast<size_t>(buffer.numel() * dtype_size(buffer.dtype())));
  }
  void download(const Buffer& buffer, void* host) override {
    sync();
    static_cast<const CudaBuffer&>(buffer).mem.download(
        host, static_cast<size_t>(buffer.numel() * dtype_size(buffer.dtype())));
  }
  std::unique_ptr<Executable> prepare(const ir::Graph& graph, const Bindings& bindings,
                                      const PrepareOptions& options) override {
    return std::make_unique<cuda::CudaExecutable>(ctx_, graph, bindings, options);
  }

 private:
  void sync() {
    ctx_->make_current();
    cuda::check(cuda::driver().cuStreamSynchronize(ctx_->stream), "cuStreamSynchronize");
  }
  std::shared_ptr<CudaContext> ctx_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int index) {
  if (const std::string why = cuda_unavailable_reason(index); !why.empty())
    throw DeviceError("[cuda] device cuda:" + std::to_string(index) + " is not available: " + why);
  return std::make_unique<CudaBackend>(index);
}

std::string cuda_unavailable_reason(int index) {
  std::string why = cuda::unavailable_reason(index);
  if (why.empty()) why = cuda::cublaslt_unavailable_reason();
  if (why.empty()) {
    try {
      cuda::nvrtc();
    } catch (const DeviceError& e) {
      why = e.what();
    }
  }
  return why;
}

}  // namespace tg::backend
