// Run-time loading of the CUDA driver and NVRTC (see driver.h).
#include "backend/cuda/driver.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <sstream>

#include "tensorgrad/errors.h"
#include "util/switches.h"

namespace tg::backend::cuda {
namespace {

constexpr CUresult kSuccess = 0;
constexpr CUresult kOutOfMemory = 2;
constexpr CUresult kNoDevice = 100;
constexpr int kAttrComputeMajor = 75, kAttrComputeMinor = 76;

void* open_first(const std::vector<std::string>& names, std::string& tried) {
  for (const std::string& n : names) {
    if (void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    tried += (tried.empty() ? "" : ", ") + n;
  }
  return nullptr;
}

template <class F>
void bind(void* lib, F& fn, const char* symbol, const char* library) {
  fn = reinterpret_cast<F>(dlsym(lib, symbol));
  if (!fn)
    throw DeviceError(std::string("[cuda] ") + library + " has no " + symbol +
                      " (a driver or NVRTC older than this library supports?)");
}

struct Loaded {
  Driver d{};
  std::string error;  // why the driver is unusable, "" when loaded
};

const Loaded& loaded_driver() {
  static const Loaded loaded = [] {
    Loaded l;
    std::string tried;
    void* lib = open_first({"libcuda.so.1", "libcuda.so"}, tried);
    if (!lib) {
      l.error = "no CUDA driver on this machine (tried " + tried + ": " + dlerror() + ")";
      return l;
    }
    try {
      Driver& d = l.d;
      bind(lib, d.cuInit, "cuInit", "libcuda");
      bind(lib, d.cuDriverGetVersion, "cuDriverGetVersion", "libcuda");
      bind(lib, d.cuDeviceGetCount, "cuDeviceGetCount", "libcuda");
      bind(lib, d.cuDeviceGet, "cuDeviceGet", "libcuda");
      bind(lib, d.cuDeviceGetName, "cuDeviceGetName", "libcuda");
      bind(lib, d.cuDeviceGetAttribute, "cuDeviceGetAttribute", "libcuda");
      bind(lib, d.cuDeviceTotalMem, "cuDeviceTotalMem_v2", "libcuda");
      bind(lib, d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", "libcuda");
      bind(lib, d.cuCtxSetCurrent, "cuCtxSetCurrent", "libcuda");
      bind(lib, d.cuCtxSynchronize, "cuCtxSynchronize", "libcuda");
      bind(lib, d.cuMemAlloc, "cuMemAlloc_v2", "libcuda");
      bind(lib, d.cuMemFree, "cuMemFree_v2", "libcuda");
      bind(lib, d.cuMemGetInfo, "cuMemGetInfo_v2", "libcuda");
      bind(lib, d.cuMemcpyHtoD, "cuMemcpyHtoD_v2", "libcuda");
      bind(lib, d.cuMemcpyDtoH, "cuMemcpyDtoH_v2", "libcuda");
      bind(lib, d.cuModuleLoadData, "cuModuleLoadData", "libcuda");
      bind(lib, d.cuModuleGetFunction, "cuModuleGetFunction", "libcuda");
      bind(lib, d.cuLaunchKernel, "cuLaunchKernel", "libcuda");
      bind(lib, d.cuGetErrorString, "cuGetErrorString", "libcuda");
      bind(lib, d.cuModuleUnload, "cuModuleUnload", "libcuda");
      bind(lib, d.cuFuncSetAttribute, "cuFuncSetAttribute", "libcuda");
      bind(lib, d.cuStreamCreate, "cuStreamCreate", "libcuda");
      bind(lib, d.cuStreamCreateWithPriority, "cuStreamCreateWithPriority", "libcuda");
      bind(lib, d.cuCtxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange", "libcuda");
      bind(lib, d.cuStreamWaitEvent, "cuStreamWaitEvent", "libcuda");
      bind(lib, d.cuStreamDestroy, "cuStreamDestroy_v2", "libcuda");
      bind(lib, d.cuStreamSynchronize, "cuStreamSynchronize", "libcuda");
      bind(lib, d.cuStreamBeginCapture, "cuStreamBeginCapture_v2", "libcuda");
      bind(lib, d.cuStreamEndCapture, "cuStreamEndCapture", "libcuda");
      bind(lib, d.cuGraphInstantiate, "cuGraphInstantiateWithFlags", "libcuda");
      bind(lib, d.cuGraphLaunch, "cuGraphLaunch", "libcuda");
      bind(lib, d.cuGraphExecDestroy, "cuGraphExecDestroy", "libcuda");
      bind(lib, d.cuGraphDestroy, "cuGraphDestroy", "libcuda");
      bind(lib, d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", "libcuda");
      bind(lib, d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", "libcuda");
      bind(lib, d.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", "libcuda");
      bind(lib, d.cuMemsetD8Async, "cuMemsetD8Async", "libcuda");
      bind(lib, d.cuMemsetD32Async, "cuMemsetD32Async", "libcuda");
      bind(lib, d.cuMemAllocHost, "cuMemAllocHost_v2", "libcuda");
      bind(lib, d.cuMemFreeHost, "cuMemFreeHost", "libcuda");
      bind(lib, d.cuEventCreate, "cuEventCreate", "libcuda");
      bind(lib, d.cuEventDestroy, "cuEventDestroy_v2", "libcuda");
      bind(lib, d.cuEventRecord, "cuEventRecord", "libcuda");
      bind(lib, d.cuEventSynchronize, "cuEventSynchronize", "libcuda");
      bind(lib, d.cuEventElapsedTime, "cuEventElapsedTime_v2", "libcuda");
      // Optional: programmatic dependent launches need it (CUDA 12+).
      d.cuLaunchKernelEx = reinterpret_cast<decltype(d.cuLaunchKernelEx)>(dlsym(lib, "cuLaunchKernelEx"));
    } catch (const DeviceError& e) {
      l.error = e.what();
      return l;
    }
    const CUresult r = l.d.cuInit(0);
    if (r == kNoDevice)
      l.error = "the CUDA driver found no GPU (cuInit: no device)";
    else if (r != kSuccess)
      l.error = "cuInit failed with CUDA error " + std::to_string(r);
    return l;
  }();
  return loaded;
}

std::string driver_message(CUresult r) {
  const char* s = nullptr;
  const Loaded& l = loaded_driver();
  if (l.error.empty() && l.d.cuGetErrorString && l.d.cuGetErrorString(r, &s) == kSuccess && s) return s;
  return "CUDA error " + std::to_string(r);
}

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string numbered(const std::string& source) {
  std::istringstream in(source);
  std::ostringstream out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    out << (n < 10 ? "   " : n < 100 ? "  " : n < 1000 ? " " : "") << n << "  " << line << "\n";
  return out.str();
}

}  // namespace

std::filesystem::path cache_dir() {
  using env::Switch;
  if (env::is_set(Switch::kCudaCache))
    return env::equals(Switch::kCudaCache, "off") ? std::filesystem::path()
                                                  : std::filesystem::path(env::value(Switch::kCudaCache));
  if (env::is_set(Switch::kXdgCacheHome))
    return std::filesystem::path(env::value(Switch::kXdgCacheHome)) / "tensorgrad";
  if (env::is_set(Switch::kHome))
    return std::filesystem::path(env::value(Switch::kHome)) / ".cache" / "tensorgrad";
  return {};
}

const Driver& driver() {
  const Loaded& l = loaded_driver();
  if (!l.error.empty()) throw DeviceError("[cuda] " + l.error);
  return l.d;
}

void check(CUresult r, const char* what) {
  if (r != kSuccess) throw DeviceError(std::string("[cuda] ") + what + ": " + driver_message(r));
}

const Nvrtc& nvrtc() {
  static const Nvrtc* loaded = nullptr;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string tried;
    std::vector<std::string> names;
    if (env::is_set(env::Switch::kNvrtcLibrary)) names.push_back(env::value(env::Switch::kNvrtcLibrary));
    for (const char* n :
         {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so"})
      names.push_back(n);
    void* lib = open_first(names, tried);
    if (!lib) {
      error = "NVRTC not found (tried " + tried + "; set TG_NVRTC_LIBRARY to its path)";
      return;
    }
    static Nvrtc n{};
    try {
      bind(lib, n.nvrtcVersion, "nvrtcVersion", "libnvrtc");
      bind(lib, n.nvrtcCreateProgram, "nvrtcCreateProgram", "libnvrtc");
      bind(lib, n.nvrtcCompileProgram, "nvrtcCompileProgram", "libnvrtc");
      bind(lib, n.nvrtcGetCUBINSize, "nvrtcGetCUBINSize", "libnvrtc");
      bind(lib, n.nvrtcGetCUBIN, "nvrtcGetCUBIN", "libnvrtc");
      bind(lib, n.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize", "libnvrtc");
      bind(lib, n.nvrtcGetProgramLog, "nvrtcGetProgramLog", "libnvrtc");
      bind(lib, n.nvrtcDestroyProgram, "nvrtcDestroyProgram", "libnvrtc");
      bind(lib, n.nvrtcGetErrorString, "nvrtcGetErrorString", "libnvrtc");
      loaded = &n;
    } catch (const DeviceError& e) {
      error = e.what();
    }
  });
  if (!loaded) throw DeviceError("[cuda] " + error);
  return *loaded;
}

std::string unavailable_reason(int index) {
  const Loaded& l = loaded_driver();
  if (!l.error.empty()) return l.error;
  int count = 0;
  if (CUresult r = l.d.cuDeviceGetCount(&count); r != kSuccess)
    return "cuDeviceGetCount: " + driver_message(r);
  if (index < 0 || index >= count)
    return "there is no cuda:" + std::to_string(index) + " (" + std::to_string(count) + " GPU" +
           (count == 1 ? "" : "s") + " visible)";
  try {
    nvrtc();
  } catch (const DeviceError& e) {
    return e.what();
  }
  return "";
}

DeviceInfo open_device(int index) {
  if (std::string why = unavailable_reason(index); !why.empty())
    throw DeviceError("[cuda] device cuda:" + std::to_string(index) + " is unusable: " + why);
  const Driver& d = driver();
  DeviceInfo info;
  info.index = index;
  CUdevice dev = 0;
  check(d.cuDeviceGet(&dev, index), "cuDeviceGet");
  char name[256] = {};
  check(d.cuDeviceGetName(name, sizeof name, dev), "cuDeviceGetName");
  info.name = name;
  check(d.cuDeviceGetAttribute(&info.sm_major, kAttrComputeMajor, dev), "cuDeviceGetAttribute");
  check(d.cuDeviceGetAttribute(&info.sm_minor, kAttrComputeMinor, dev), "cuDeviceGetAttribute");
  // CU_DEVICE_ATTRIBUTE_{MULTIPROCESSOR_COUNT, MAX_THREADS_PER_MULTIPROCESSOR,
  // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, L2_CACHE_SIZE}.
  constexpr int kAttrSmCount = 16, kAttrThreadsPerSm = 39, kAttrSmemPerBlockOptin = 97, kAttrSmemPerSm = 81,
                kAttrL2Bytes = 38;
  auto attribute = [&](int attr) {
    int v = 0;
    check(d.cuDeviceGetAttribute(&v, attr, dev), "cuDeviceGetAttribute");
    return v;
  };
  info.sm_count = attribute(kAttrSmCount);
  info.threads_per_sm = attribute(kAttrThreadsPerSm);
  info.smem_per_block = attribute(kAttrSmemPerBlockOptin);
  info.smem_per_sm = attribute(kAttrSmemPerSm);
  info.l2_bytes = attribute(kAttrL2Bytes);
  check(d.cuDeviceTotalMem(&info.total_bytes, dev), "cuDeviceTotalMem");
  check(d.cuDriverGetVersion(&info.driver_version), "cuDriverGetVersion");
  CUcontext ctx = nullptr;
  check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  info.context = ctx;
  return info;
}

std::vector<char> compile_cubin(const std::string& source, const std::string& name, int sm_major,
                                int sm_minor) {
  const Nvrtc& n = nvrtc();
  int major = 0, minor = 0;
  n.nvrtcVersion(&major, &minor);
  const std::string arch = "--gpu-architecture=sm_" + std::to_string(sm_major) + std::to_string(sm_minor);
  std::vector<std::string> options = {arch, "-std=c++17", "--fmad=true"};
  if (env::is_set(env::Switch::kCudaLineinfo))
    options.emplace_back("-lineinfo");  // profiling aid: SASS ↔ source lines in Nsight Compute
  std::string key = source;
  for (const std::string& o : options) key += "\n//" + o;
  key += "\n//nvrtc " + std::to_string(major) + "." + std::to_string(minor);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(key)));
  const std::filesystem::path dir = cache_dir();
  const std::filesystem::path file =
      dir.empty() ? std::filesystem::path() : dir / (std::string(hex) + ".cubin");
  if (!file.empty()) {
    std::ifstream in(file, std::ios::binary);
    if (in) return std::vector<char>(std::istreambuf_iterator<char>(in), {});
  }

  nvrtcProgram prog = nullptr;
  if (nvrtcResult r =
          n.nvrtcCreateProgram(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr);
      r != 0)
    throw DeviceError(std::string("[cuda] nvrtcCreateProgram: ") + n.nvrtcGetErrorString(r));
  std::vector<const char*> opts;
  for (const std::string& o : options) opts.push_back(o.c_str());
  const nvrtcResult compiled = n.nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  size_t log_size = 0;
  n.nvrtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 0) n.nvrtcGetProgramLog(prog, log.data());
  while (!log.empty() && log.back() == '\0') log.pop_back();  // the size counts the terminator
  if (compiled != 0) {
    n.nvrtcDestroyProgram(&prog);
    throw DeviceError("[cuda] NVRTC could not compile kernel '" + name + "' (" +
                      n.nvrtcGetErrorString(compiled) + "):\n" + log + "\n--- generated source ---\n" +
                      numbered(source));
  }
  size_t size = 0;
  n.nvrtcGetCUBINSize(prog, &size);
  std::vector<char> cubin(size);
  n.nvrtcGetCUBIN(prog, cubin.data());
  n.nvrtcDestroyProgram(&prog);
  if (!file.empty()) {  // best effort: a cache that cannot be written is no error
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::filesystem::path tmp =
        file.string() + ".tmp" + std::to_string(reinterpret_cast<uintptr_t>(&cubin));
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
    }
    std::filesystem::rename(tmp, file, ec);
    if (ec) std::filesystem::remove(tmp, ec);
  }
  return cubin;
}

std::vector<std::vector<char>> compile_cubins(const std::vector<KernelSource>& kernels, int sm_major,
                                              int sm_minor) {
  std::vector<std::vector<char>> out(kernels.size());
  std::vector<std::exception_ptr> errors(kernels.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < kernels.size(); i = next++) {
      try {
        out[i] = compile_cubin(kernels[i].source, kernels[i].name, sm_major, sm_minor);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const size_t threads = std::min<size_t>(kernels.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

DeviceMemory::DeviceMemory(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const Driver& d = driver();
  const CUresult r = d.cuMemAlloc(&ptr_, bytes);
  if (r == kOutOfMemory) {
    size_t free = 0, total = 0;
    d.cuMemGetInfo(&free, &total);
    throw DeviceError("[cuda] out of device memory: " + std::to_string(bytes) + " bytes requested, " +
                      std::to_string(free) + " free of " + std::to_string(total));
  }
  check(r, "cuMemAlloc");
}

DeviceMemory::~DeviceMemory() {
  if (ptr_) driver().cuMemFree(ptr_);
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& o) noexcept {
  if (this != &o) {
    if (ptr_) driver().cuMemFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = 0;
    o.bytes_ = 0;
  }
  return *this;
}

void DeviceMemory::upload(const void* host, size_t bytes) {
  if (bytes > bytes_)
    throw DeviceError("[cuda] upload of " + std::to_string(bytes) + " bytes into " + std::to_string(bytes_));
  if (bytes == 0) return;
  check(driver().cuMemcpyHtoD(ptr_, host, bytes), "cuMemcpyHtoD");
  // From pageable memory cuMemcpyHtoD may return once the bytes are staged, before the DMA
  // into device memory completes; the copy runs on the legacy stream, which orders nothing
  // on the backend's non-blocking stream. Wait for it, or a step launched next can read the
  // old contents (a program computing with the parameters from before init_params).
  check(driver().cuStreamSynchronize(nullptr), "cuStreamSynchronize (upload)");
}

void DeviceMemory::download(void* host, size_t bytes) const {
  if (bytes > bytes_)
    throw DeviceError("[cuda] download of " + std::to_string(bytes) + " bytes from " +
                      std::to_string(bytes_));
  if (bytes) check(driver().cuMemcpyDtoH(host, ptr_, bytes), "cuMemcpyDtoH");
}

Kernel::Kernel(const std::vector<char>& cubin, const std::string& name, unsigned dynamic_shared_bytes) {
  const Driver& d = driver();
  check(d.cuModuleLoadData(&module_, cubin.data()), "cuModuleLoadData");
  check(d.cuModuleGetFunction(&fn_, module_, name.c_str()), ("cuModuleGetFunction " + name).c_str());
  constexpr int kMaxDynamicShared = 8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
  if (dynamic_shared_bytes > 48 * 1024)
    check(d.cuFuncSetAttribute(fn_, kMaxDynamicShared, static_cast<int>(dynamic_shared_bytes)),
          ("cuFuncSetAttribute (dynamic shared memory) " + name).c_str());
}

Kernel::~Kernel() {
  if (module_) driver().cuModuleUnload(module_);
}

Kernel& Kernel::operator=(Kernel&& o) noexcept {
  if (this != &o) {
    if (module_) driver().cuModuleUnload(module_);
    module_ = o.module_;
    fn_ = o.fn_;
    o.module_ = nullptr;
    o.fn_ = nullptr;
  }
  return *this;
}

void Kernel::launch(const unsigned grid[3], const unsigned block[3], unsigned shared_bytes, CUstream stream,
                    void** args, bool early) const {
  const Driver& d = driver();
  if (early && d.cuLaunchKernelEx) {
    CUlaunchAttribute attr{};
    attr.id = kLaunchAttributeProgrammaticSerialization;
    attr.value.value = 1;
    const CUlaunchConfig config{grid[0],  grid[1],      grid[2], block[0], block[1],
                                block[2], shared_bytes, stream,  &attr,    1};
    check(d.cuLaunchKernelEx(&config, fn_, args, nullptr), "cuLaunchKernelEx");
    return;
  }
  check(d.cuLaunchKernel(fn_, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_bytes, stream,
                         args, nullptr),
        "cuLaunchKernel");
}

}  // namespace tg::backend::cuda
