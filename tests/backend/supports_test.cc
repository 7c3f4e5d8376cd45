// A program that needs a kernel its backend lacks fails at compile time, naming the op and
// the backend (backend::require_supported, called by the runtime before prepare).
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include "backend/backend.h"
#include "ir/api_util.h"

namespace {

using namespace tg;

/// The CPU backend, claiming no kernel for cumsum.
class NoCumsum final : public backend::Backend {
 public:
  const char* name() const override { return "nocumsum"; }
  bool supports(ir::Op op) const override { return op != ir::Op::kCumsum; }
  std::unique_ptr<backend::Buffer> allocate(DType dtype, int64_t numel) override {
    return cpu_->allocate(dtype, numel);
  }
  void upload(backend::Buffer& b, const void* host) override { cpu_->upload(b, host); }
  void download(const backend::Buffer& b, void* host) override { cpu_->download(b, host); }
  std::unique_ptr<backend::Executable> prepare(const ir::Graph& g, const backend::Bindings& b,
                                               const backend::PrepareOptions& o) override {
    return cpu_->prepare(g, b, o);
  }

 private:
  std::unique_ptr<backend::Backend> cpu_ = backend::make_cpu_backend();
};

TEST(Supports, AMissingKernelIsACompileErrorNamingTheOpAndTheBackend) {
  ir::Trace plain, with_cumsum;
  for (ir::Trace* t : {&plain, &with_cumsum}) {
    ir::TraceScope scope(*t);
    Tensor x = ir::named_leaf(t->graph, ir::Op::kInput, "x", {4, 3}, DType::kF32, Loc::current());
    Tensor y = exp(x) * 2.0;
    t->graph.outputs = {(t == &plain ? y : cumsum(y, 1)).id()};
  }
  NoCumsum be;
  EXPECT_NO_THROW(backend::require_supported(be, plain.graph));
  const ir::Trace& t = with_cumsum;
  try {
    backend::require_supported(be, t.graph);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cumsum"), std::string::npos) << what;
    EXPECT_NE(what.find("nocumsum backend"), std::string::npos) << what;
  }
  // The real backends have a kernel for every op the graph holds.
  EXPECT_NO_THROW(backend::require_supported(*backend::make_cpu_backend(), t.graph));
  EXPECT_NO_THROW(backend::require_supported(*backend::make_ref_backend(), t.graph));
}

}  // namespace
