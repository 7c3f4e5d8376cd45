// The CUDA driver API and NVRTC, loaded at run time (dlopen), so that the library builds
// without the CUDA toolkit and runs on machines without a GPU: there, asking for a CUDA device
// throws a DeviceError saying why (no libcuda, no device, driver too old, no NVRTC) instead of
// the program failing to load. Only the handful of entry points the backend uses are declared,
// with the ABI types spelled out here (they are stable C types in cuda.h / nvrtc.h).
//
// Covers loading, device discovery, memory, NVRTC compile to a cubin for the device's own
// architecture with an on-disk cache, module load and launch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tg::backend::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphExec = struct CUgraphExec_st*;
using CUevent = struct CUevent_st*;
/// cuLaunchKernelEx's configuration (cuda.h's CUlaunchConfig and CUlaunchAttribute layouts).
struct CUlaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int value;  // e.g. programmatic stream serialization allowed
  } value;
};
struct CUlaunchConfig {
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
  CUstream stream;
  CUlaunchAttribute* attrs;
  unsigned num_attrs;
};
/// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: the kernel may start before the one
/// before it in the stream ends (it waits for it with griddepcontrol.wait).
constexpr int kLaunchAttributeProgrammaticSerialization = 6;

using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;

/// The driver entry points (the _v2 ABI where one exists).
struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemGetInfo)(size_t*, size_t*);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamCreateWithPriority)(CUstream*, unsigned, int);
  CUresult (*cuCtxGetStreamPriorityRange)(int*, int*);  // (least, greatest)
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamBeginCapture)(CUstream, int);
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*);
  CUresult (*cuGraphInstantiate)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
  CUresult (*cuMemAllocHost)(void**, size_t);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**);  // null before CUDA 12
};

struct Nvrtc {
  nvrtcResult (*nvrtcVersion)(int*, int*);
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                    const char* const*);
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, size_t*);
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char*);
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t*);
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char*);
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram*);
  const char* (*nvrtcGetErrorString)(nvrtcResult);
};

/// The loaded driver (cuInit done); throws DeviceError naming what is missing.
const Driver& driver();
/// The loaded NVRTC; throws DeviceError naming the libraries it tried.
const Nvrtc& nvrtc();
/// Throws DeviceError "[cuda] <what>: <driver's message>" unless r is CUDA_SUCCESS.
void check(CUresult r, const char* what);

/// Where compiled kernels and product tunings are kept between processes: $TG_CUDA_CACHE
/// ("off": nowhere, an empty path), else $XDG_CACHE_HOME/tensorgrad, else ~/.cache/tensorgrad.
std::filesystem::path cache_dir();

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  // What launch shapes are sized by (queried, never assumed from a GPU model):
  int sm_count = 0;            // streaming multiprocessors
  int threads_per_sm = 0;      // resident threads an SM holds at most
  int64_t smem_per_block = 0;  // bytes of shared memory a block may opt into
  int64_t smem_per_sm = 0;     // bytes of shared memory per SM
  int64_t l2_bytes = 0;        // L2 cache size
  size_t total_bytes = 0;
  int driver_version = 0;       // e.g. 13000
  CUcontext context = nullptr;  // the device's primary context
};
/// Why device `index` cannot be used ("" when it can): nothing thrown, for Device::best().
std::string unavailable_reason(int index);
/// The device's properties; makes its primary context current on this thread. Throws
/// DeviceError when it cannot be used.
DeviceInfo open_device(int index);

/// CUDA C++ source → cubin for sm_<major><minor>, through NVRTC. Results are cached on disk,
/// keyed by a hash of the source, the options, the architecture and the NVRTC version, in
/// $TG_CUDA_CACHE (default $XDG_CACHE_HOME/tensorgrad or ~/.cache/tensorgrad; "off" disables
/// it). A compile error throws DeviceError with NVRTC's log and the numbered source.
std::vector<char> compile_cubin(const std::string& source, const std::string& name, int sm_major,
                                int sm_minor);

struct KernelSource {
  std::string name, source;
};
/// compile_cubin for many kernels at once, on up to hardware_concurrency threads (NVRTC
/// programs are independent); results in input order. The first failure is rethrown.
std::vector<std::vector<char>> compile_cubins(const std::vector<KernelSource>& kernels, int sm_major,
                                              int sm_minor);

/// A loaded cubin and its one kernel (generated kernels are one per module).
class Kernel {
 public:
  Kernel() = default;
  Kernel(const std::vector<char>& cubin, const std::string& name, unsigned dynamic_shared_bytes = 0);
  ~Kernel();
  Kernel(Kernel&& o) noexcept : module_(o.module_), fn_(o.fn_) {
    o.module_ = nullptr;
    o.fn_ = nullptr;
  }
  Kernel& operator=(Kernel&& o) noexcept;
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;
  CUfunction get() const { return fn_; }
  /// args: pointers to each parameter's value, in order (cuLaunchKernel's kernelParams).
  /// early: a programmatic dependent launch (the kernel waits for the one before it itself: see
  /// pdl_source); ignored where the driver has no cuLaunchKernelEx.
  void launch(const unsigned grid[3], const unsigned block[3], unsigned shared_bytes, CUstream stream,
              void** args, bool early = false) const;

 private:
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
};

/// Device memory that frees itself.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(size_t bytes);  // OOM: DeviceError with the bytes asked and free
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = 0;
    o.bytes_ = 0;
  }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  CUdeviceptr get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  void upload(const void* host, size_t bytes);
  void download(void* host, size_t bytes) const;

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

}  // namespace tg::backend::cuda
