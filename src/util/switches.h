// Every environment variable the library reads, declared once: its name, its default and what
// it does. Nothing else in src/ calls getenv; the README lists the same table (a test checks).
// An empty value counts as unset. Most are read when asked, so a program (or a test) may change
// them between compiles; TG_CUDA_TUNE, TG_CUDA_GEMV, TG_CUDA_GEMV_NORM and TG_CPU_AMX once per process.
#pragma once
#include <cstdint>
#include <span>
#include <string>

namespace tg::env {

// X(enum, variable, default, one line of documentation)
// clang-format off
#define TG_SWITCHES(X)                                                                                        \
  X(kProfile, "TG_PROFILE", "", "1: time preparation and every kernel; print per-op tables when a program "   \
                                "is destroyed. 2 (cuda): also list one step's kernels with their bandwidth")  \
  X(kCudaCache, "TG_CUDA_CACHE", "", "where compiled kernels and cuBLASLt choices are kept between runs; "      \
                                     "off: nowhere (default: $XDG_CACHE_HOME/tensorgrad or ~/.cache/tensorgrad)") \
  X(kXdgCacheHome, "XDG_CACHE_HOME", "", "the usual per-user cache folder, under which the CUDA cache lives")    \
  X(kHome, "HOME", "", "the home folder: ~/.cache/tensorgrad when XDG_CACHE_HOME is not set")                    \
  X(kNvrtcLibrary, "TG_NVRTC_LIBRARY", "", "a path to libnvrtc, tried before the usual library names")           \
  X(kCudaTune, "TG_CUDA_TUNE", "", "all: time every cuBLASLt candidate of every product; off: none (the "       \
                                   "heuristic's first). Default: all under 8 GFLOP, four above, kept in the cache") \
  X(kCudaTuneTrace, "TG_CUDA_TUNE_TRACE", "", "1: print each product's cuBLASLt choice, timed or from the cache") \
  X(kCudaLineinfo, "TG_CUDA_LINEINFO", "", "1: compile kernels with line information (Nsight Compute's source view)") \
  X(kCudaNoSide, "TG_CUDA_NO_SIDE", "", "1: run every step on the main stream (no side steps beside the chain, collectives in it)")  \
  X(kCudaGemv, "TG_CUDA_GEMV", "", "off: decode-sized products (<= 8 rows) on cuBLASLt instead of gemv kernels")  \
  X(kCudaPdl, "TG_CUDA_PDL", "", "off: kernels start only after the one before them ends (no programmatic dependent launch)") \
  X(kCudaConv, "TG_CUDA_CONV", "", "gather: conv ops as implicit GEMMs that gather from device memory, not from shared-memory tiles") \
  X(kCudaGemvNorm, "TG_CUDA_GEMV_NORM", "", "off: the norm before a decode-sized product as a kernel of its own") \
  X(kCheckFinite, "TG_CHECK_FINITE", "", "1 (cpu): check the float values (f32, bf16, f16) every kernel writes; the first NaN or infinity is an error naming its op and where it was traced") \
  X(kCpuAmx, "TG_CPU_AMX", "", "off: bf16 products skip the AMX tiles (AVX512-BF16, else widened to f32, as on a CPU without AMX)") \
  X(kRank, "RANK", "", "this process's rank among WORLD_SIZE (torchrun's launch variables, read by distributed::init)") \
  X(kWorldSize, "WORLD_SIZE", "", "how many processes train together") \
  X(kLocalRank, "LOCAL_RANK", "", "this process's rank on its host: the GPU it uses (cuda:LOCAL_RANK)") \
  X(kMasterAddr, "MASTER_ADDR", "", "the host of rank 0, where the other ranks meet it (NCCL engine)") \
  X(kMasterPort, "MASTER_PORT", "", "the TCP port rank 0 listens on for the rendezvous (NCCL engine)") \
  X(kOmpiRank, "OMPI_COMM_WORLD_RANK", "", "Open MPI's mpirun: the rank (its presence picks the MPI engine)") \
  X(kOmpiSize, "OMPI_COMM_WORLD_SIZE", "", "Open MPI's mpirun: the number of processes") \
  X(kOmpiLocalRank, "OMPI_COMM_WORLD_LOCAL_RANK", "", "Open MPI's mpirun: the rank on this host") \
  X(kPmiRank, "PMI_RANK", "", "MPICH's and Intel MPI's launchers: the rank (its presence picks the MPI engine)") \
  X(kPmiSize, "PMI_SIZE", "", "MPICH's and Intel MPI's launchers: the number of processes") \
  X(kNcclLibrary, "TG_NCCL_LIBRARY", "", "a path to libnccl, tried before libnccl.so.2 and libnccl.so") \
  X(kDistTimeout, "TG_DIST_TIMEOUT", "", "seconds a rank waits for the others (rendezvous and control exchanges) "  \
                                         "before it gives up with an error; overrides InitOptions::timeout_s")  \
  X(kDistCheck, "TG_DIST_CHECK", "", "1: after every data-parallel step, compare the parameters of all ranks "   \
                                     "(a hash of their bytes); a rank that differs is an error naming it")
// clang-format on

enum class Switch : uint8_t {
// clang-format off
#define TG_SWITCH_ENUM(e, name, fallback, doc) e,
  // clang-format on
  TG_SWITCHES(TG_SWITCH_ENUM)
// clang-format off
#undef TG_SWITCH_ENUM
  // clang-format on
};

struct SwitchInfo {
  Switch id;
  const char* name;
  const char* fallback;  // the value when the variable is unset or empty
  const char* doc;
};

/// Every switch, in declaration order.
std::span<const SwitchInfo> all_switches();
const SwitchInfo& info(Switch s);
/// The variable's value, or its default when unset or empty.
std::string value(Switch s);
/// Whether the variable is set to a non-empty value.
bool is_set(Switch s);
/// Whether value(s) == v.
bool equals(Switch s, const char* v);
/// value(s) as a positive integer, or 0 when it is not one.
int64_t positive_int(Switch s);

}  // namespace tg::env
