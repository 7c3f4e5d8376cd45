// Times the skinny-product kernel (gemv.cc) on the decode step's products of GPT-2 124M and
// TinyLlama-1.1B (one row, bf16 weights, the f32 row rounded to bf16 as it is read, the
// norms and epilogues the decode programs fuse), for every split of a column over warps, and
// prints the weight bytes' bandwidth against a device copy's. The weights rotate through enough
// copies that L2 (50 MB on an H200) holds none of them between launches, as in a decode step.
// For finding why a decode step's products run below the copy bandwidth.
//
//   ./cuda_gemv_probe            (needs a GPU)
//   ./cuda_gemv_probe --source   (no GPU: prints the generated sources, for ptxas -v)
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda/driver.h"
#include "backend/cuda/small_matmul.h"
#include "cuda_timing.h"

namespace cuda = tg::backend::cuda;

namespace {

struct Case {
  const char* name;
  int64_t n, k;
  cuda::GemvNorm norm;
  cuda::GemvEpilogue epi;
};

std::vector<Case> cases() {
  const cuda::GemvNorm layer{.on = true, .layer = true, .w = true, .b = true},
      rms{.on = true, .layer = false, .w = true, .b = false, .eps = 1e-6};
  return {
      {"gpt2 ln1+qkv", 2304, 768, layer, {.bias = true}},
      {"gpt2 proj+res", 768, 768, {}, {.bias = true, .residual = true}},
      {"gpt2 ln2+fc+gelu", 3072, 768, layer, {.bias = true, .gelu = true}},
      {"gpt2 fc2+res", 768, 3072, {}, {.bias = true, .residual = true}},
      {"gpt2 lnf+head", 50257, 768, layer, {}},
      {"llama rms+qkv", 2560, 2048, rms, {}},
      {"llama o+res", 2048, 2048, {}, {.residual = true}},
      {"llama rms+gate_up", 11264, 2048, rms, {}},
      {"llama down+res", 2048, 5632, {}, {.residual = true}},
      {"llama rms+head", 32000, 2048, rms, {}},
  };
}

cuda::Launch launch_for(const Case& c, int ks, int sm_count) {
  const cuda::GemvTypes types{.a_bf16 = false, .b_bf16 = true, .round_a = true, .b_fixed = true};
  return cuda::gemv_kernel("gemv_probe", 1, c.n, c.k, {1, c.k, c.k, 1, 0}, {c.k, c.n, 1, c.k, 0}, c.epi, 0,
                           sm_count, c.norm, ks, types);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--source") {
    for (const Case& c : cases())
      std::printf("// ==== %s\n%s\n", c.name, launch_for(c, 0, 132).source.c_str());
    return 0;
  }
  if (const std::string why = cuda::unavailable_reason(0); !why.empty()) {
    std::printf("cuda_gemv_probe: no usable GPU: %s\n", why.c_str());
    return 0;
  }
  const cuda::DeviceInfo info = cuda::open_device(0);
  const cuda::Driver& d = cuda::driver();
  std::printf("# %s (sm_%d%d, %d SMs)\n", info.name.c_str(), info.sm_major, info.sm_minor, info.sm_count);
  {
    const size_t bytes = size_t{1} << 30;
    cuda::DeviceMemory src(bytes), dst(bytes);
    const float ms = cuda_time_ms(
        [&] { cuda::check(d.cuMemcpyDtoDAsync(dst.get(), src.get(), bytes, nullptr), "copy"); }, 20);
    std::printf("copy bandwidth (1 GiB device copy, read + write) %.0f GB/s\n",
                2.0 * static_cast<double>(bytes) / (ms * 1e6));
  }
  const size_t pool_bytes = size_t{512} << 20;  // the rotating copies of W
  cuda::DeviceMemory pool(pool_bytes), x(size_t{1} << 20), nw(size_t{1} << 20), nb(size_t{1} << 20),
      bias(size_t{1} << 20), res(size_t{1} << 20), out(size_t{1} << 20);
  cuda::check(d.cuMemsetD8Async(pool.get(), 0x3c, pool_bytes, nullptr),
              "memset");  // small finite bf16 values
  cuda::check(d.cuMemsetD8Async(x.get(), 0x3c, size_t{1} << 20, nullptr), "memset");
  cuda::check(d.cuMemsetD8Async(nw.get(), 0x3c, size_t{1} << 20, nullptr), "memset");
  std::printf("%-20s %6s %6s %4s %6s %9s %9s\n", "product", "n", "k", "ks", "grid", "us", "GB/s");
  for (const Case& c : cases()) {
    const size_t wbytes = static_cast<size_t>(c.n * c.k * 2), stride = (wbytes + 255) / 256 * 256;
    const size_t copies = std::max<size_t>(1, pool_bytes / stride);
    for (int ks : {0, 1, 2, 4, 8}) {
      if (ks > 0 && c.k / ks < 256) continue;
      const cuda::Launch l = launch_for(c, ks, info.sm_count);
      const cuda::Kernel kern(cuda::compile_cubin(l.source, l.name, info.sm_major, info.sm_minor), l.name,
                              l.shared_bytes);
      size_t next = 0;
      auto run = [&] {
        cuda::CUdeviceptr pa = x.get(), pw = pool.get() + (next++ % copies) * stride, pnw = nw.get(),
                          pnb = nb.get(), pbias = bias.get(), pres = res.get(), po = out.get();
        std::vector<void*> args{&pa};
        if (c.norm.on && (c.norm.w || c.norm.b)) args.insert(args.end(), {&pnw, &pnb});
        args.push_back(&pw);
        if (c.epi.bias) args.push_back(&pbias);
        if (c.epi.residual) args.push_back(&pres);
        args.push_back(&po);
        kern.launch(l.grid, l.block, l.shared_bytes, nullptr, args.data());
      };
      const float ms = cuda_time_ms(run, 200);
      std::printf("%-20s %6lld %6lld %4s %6u %9.2f %9.0f\n", c.name, static_cast<long long>(c.n),
                  static_cast<long long>(c.k), ks == 0 ? "auto" : std::to_string(ks).c_str(), l.grid[0],
                  static_cast<double>(ms) * 1e3,
                  static_cast<double>(wbytes) / (static_cast<double>(ms) * 1e6));
    }
  }
  return 0;
}
