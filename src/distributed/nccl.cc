// The NCCL engine: collectives between GPUs, one per process, through libnccl loaded at run
// time (TG_NCCL_LIBRARY, else libnccl.so.2, else libnccl.so), so the library builds and runs
// without it. The few entry points and constants used are declared here from NCCL's public
// ABI (nccl.h): ncclUniqueId is 128 bytes passed by value, ncclComm_t an opaque pointer,
// results and enums are ints. Rank 0's unique id reaches the others over the TCP rendezvous,
// which then carries the control exchanges.
#include <dlfcn.h>

#include <mutex>

#include "backend/cuda/driver.h"
#include "distributed/launch.h"
#include "distributed/tcp_store.h"
#include "tensorgrad/errors.h"
#include "util/switches.h"

namespace tg::dist {
namespace {

using ncclResult_t = int;
using ncclComm_t = struct ncclComm*;
struct ncclUniqueId {
  char internal[128];
};
constexpr ncclResult_t kNcclSuccess = 0;
constexpr int kNcclInt32 = 2, kNcclFloat32 = 7, kNcclBfloat16 = 9;
constexpr int kNcclSum = 0;

struct Nccl {
  ncclResult_t (*ncclGetUniqueId)(ncclUniqueId*);
  ncclResult_t (*ncclCommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*ncclAllReduce)(const void*, void*, size_t, int, int, ncclComm_t, void*);
  ncclResult_t (*ncclReduceScatter)(const void*, void*, size_t, int, int, ncclComm_t, void*);
  ncclResult_t (*ncclAllGather)(const void*, void*, size_t, int, ncclComm_t, void*);
  ncclResult_t (*ncclGroupStart)();
  ncclResult_t (*ncclGroupEnd)();
  ncclResult_t (*ncclCommDestroy)(ncclComm_t);
  ncclResult_t (*ncclCommAbort)(ncclComm_t);
  ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t, ncclResult_t*);
  const char* (*ncclGetErrorString)(ncclResult_t);
};

/// libnccl, loaded once; throws DistributedError naming the libraries tried.
const Nccl& nccl() {
  static Nccl n{};
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> names;
    if (env::is_set(env::Switch::kNcclLibrary)) names.push_back(env::value(env::Switch::kNcclLibrary));
    names.insert(names.end(), {"libnccl.so.2", "libnccl.so"});
    void* lib = nullptr;
    std::string tried;
    for (const std::string& name : names) {
      lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) break;
      tried += (tried.empty() ? "" : "; ") + std::string(dlerror());
    }
    if (lib == nullptr) {
      error = "NCCL not found (" + tried + "): install libnccl2 or set TG_NCCL_LIBRARY to its path";
      return;
    }
    auto bind = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      if (fn == nullptr && error.empty())
        error = std::string("libnccl has no ") + symbol + " (NCCL older than 2.12?)";
    };
    bind(n.ncclGetUniqueId, "ncclGetUniqueId");
    bind(n.ncclCommInitRank, "ncclCommInitRank");
    bind(n.ncclAllReduce, "ncclAllReduce");
    bind(n.ncclReduceScatter, "ncclReduceScatter");
    bind(n.ncclAllGather, "ncclAllGather");
    bind(n.ncclGroupStart, "ncclGroupStart");
    bind(n.ncclGroupEnd, "ncclGroupEnd");
    bind(n.ncclCommDestroy, "ncclCommDestroy");
    bind(n.ncclCommAbort, "ncclCommAbort");
    bind(n.ncclCommGetAsyncError, "ncclCommGetAsyncError");
    bind(n.ncclGetErrorString, "ncclGetErrorString");
  });
  if (!error.empty()) throw DistributedError("[distributed] " + error);
  return n;
}

void check(ncclResult_t r, int rank, const char* what) {
  if (r != kNcclSuccess)
    throw DistributedError("[distributed] rank " + std::to_string(rank) + ": " + what +
                           " failed: " + nccl().ncclGetErrorString(r));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int rank, int size, std::unique_ptr<TcpGroup> control, ncclComm_t comm)
      : Communicator(rank, size), control_(std::move(control)), comm_(comm) {}
  ~NcclCommunicator() override {
    // A communicator with a pending error (a peer gone) cannot finish a destroy: abort it.
    ncclResult_t pending = kNcclSuccess;
    nccl().ncclCommGetAsyncError(comm_, &pending);
    if (pending != kNcclSuccess)
      nccl().ncclCommAbort(comm_);
    else
      nccl().ncclCommDestroy(comm_);
  }

  Engine engine() const override { return Engine::kNccl; }
  const char* name() const override { return "nccl"; }

  void all_reduce_host(const void*, void*, int64_t, DType) override {
    throw Error("[distributed] all_reduce_host: the NCCL engine reduces GPU memory only (all_reduce_device)");
  }

  void all_reduce_device(const void* send, void* recv, int64_t count, DType dtype, void* stream) override {
    check(nccl().ncclAllReduce(send, recv, elements(count), type(dtype), kNcclSum, comm_, stream), rank(),
          "ncclAllReduce");
  }
  void reduce_scatter_device(const void* send, void* recv, int64_t count, DType dtype,
                             void* stream) override {
    check(nccl().ncclReduceScatter(send, recv, elements(count), type(dtype), kNcclSum, comm_, stream), rank(),
          "ncclReduceScatter");
  }
  void all_gather_device(const void* send, void* recv, int64_t count, DType dtype, void* stream) override {
    check(nccl().ncclAllGather(send, recv, elements(count), type(dtype), comm_, stream), rank(),
          "ncclAllGather");
  }
  void group_start() override { check(nccl().ncclGroupStart(), rank(), "ncclGroupStart"); }
  void group_end() override { check(nccl().ncclGroupEnd(), rank(), "ncclGroupEnd"); }

  void all_gather_bytes(const void* in, void* out, int64_t bytes) override {
    control_->all_gather(in, out, bytes);
  }
  void barrier() override { control_->barrier(); }

 private:
  static int type(DType dtype) {
    switch (dtype) {
      case DType::kF32: return kNcclFloat32;
      case DType::kBF16: return kNcclBfloat16;
      case DType::kI32: return kNcclInt32;
      case DType::kBool:
      case DType::kF16:
      case DType::kI8: break;
    }
    throw Error(std::string("[distributed] the NCCL engine's collectives take f32, bf16 or i32, not ") +
                dtype_name(dtype));
  }
  static size_t elements(int64_t count) {
    if (count < 0) throw Error("[distributed] a collective of " + std::to_string(count) + " elements");
    return static_cast<size_t>(count);
  }

  std::unique_ptr<TcpGroup> control_;
  ncclComm_t comm_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, double timeout_s) {
  const std::string who = "[distributed::init] rank " + std::to_string(env.rank) + ": ";
  if (env.master_addr.empty() || env.master_port == 0)
    throw DistributedError(
        who + (env.master_addr.empty() ? "MASTER_ADDR" : "MASTER_PORT") +
        " is not set: the NCCL engine meets rank 0 at MASTER_ADDR:MASTER_PORT" +
        (env.by_mpi && !built_with_mpi() ? " (this build has no MPI for mpirun's processes)" : ""));
  if (env.local_rank < 0)
    throw DistributedError(who + "LOCAL_RANK is not set: the NCCL engine uses GPU cuda:LOCAL_RANK");
  const Nccl& n = nccl();
  // NCCL drives the GPU through the CUDA runtime, which works in the context current on the
  // calling thread when there is one. Making device LOCAL_RANK's primary context current here
  // (the one the CUDA backend uses for cuda:LOCAL_RANK) binds the communicator to that GPU,
  // without loading the runtime ourselves for cudaSetDevice.
  try {
    backend::cuda::open_device(env.local_rank);
  } catch (const DeviceError& e) {
    throw DistributedError(who + "cannot use GPU cuda:" + std::to_string(env.local_rank) +
                           " (LOCAL_RANK): " + e.what());
  }
  auto control = std::make_unique<TcpGroup>(env.rank, env.size, env.master_addr, env.master_port, timeout_s);
  ncclUniqueId id{};
  if (env.rank == 0) check(n.ncclGetUniqueId(&id), env.rank, "ncclGetUniqueId");
  control->broadcast(&id, sizeof id);
  ncclComm_t comm = nullptr;
  check(n.ncclCommInitRank(&comm, env.size, id, env.rank), env.rank, "ncclCommInitRank");
  return std::make_unique<NcclCommunicator>(env.rank, env.size, std::move(control), comm);
}

}  // namespace tg::dist
