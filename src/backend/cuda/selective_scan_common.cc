// The pieces both selective_scan kernels share (selective_scan_common.h): the work split,
// the generated prelude (constants, then the device helpers of kernels/scan_common.cuh), their
// launch, the scratch layout, and the kernel that sums the backward's partials
// (kernels/scan_reduce.cuh). The kernels themselves and the design notes: selective_scan.cc.
#include "backend/cuda/selective_scan_common.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cuda/kernel_sources.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {
namespace scan_detail {
namespace {

int64_t pow2_at_least(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

// Channels per block: a power of two dividing a group's channels (a block stages one group's B
// and C), up to max_threads threads and 32 channels (ScanShape::max_channels caps it: tuning sweeps);
// ct channels per thread where the block's channels and the channel's lanes allow it.
Split split_for(const ScanShape& s, int64_t ns, int64_t max_threads, int64_t ct) {
  Split sp;
  sp.ns = ns;
  sp.lanes = pow2_at_least((s.states + ns - 1) / ns);
  if (sp.lanes < ct) ct = 1;
  sp.ct = ct;
  int64_t cap = 32;
  if (s.max_channels > 0) cap = s.max_channels;  // tuning sweeps
  const int64_t per = s.channels / s.groups;
  while (per % (sp.cb * 2) == 0 && sp.cb * 2 * sp.lanes / ct <= max_threads && sp.cb * 2 <= cap) sp.cb *= 2;
  if (sp.cb % ct != 0) sp.ct = 1;
  sp.blocks = s.channels / sp.cb;
  return sp;
}

// nbuf copies (the COPY of the Stage in kernels/scan_common.cuh: rows, B and C, the backward's dB/dC terms),
// then bias, D and the forward's mbarrier.
int64_t scan_shared_floats(const Split& sp, bool grad, int nbuf) {
  const int64_t rows = grad ? 6 : 2;  // u, Δ, (slope, dy, du and dΔ)
  const int64_t k = grad ? kChunk : kForwardSteps;
  const int64_t warps = sp.threads() < 32 ? 1 : sp.threads() / 32;
  const int64_t copy = rows * sp.cb * (k + 4) + 2 * sp.lanes * (k * sp.ns + 4) +
                       (grad ? kChunk * (warps * 2 * sp.lanes * sp.ns + 4) : 0);
  return nbuf * copy + 2 * sp.cb + (grad ? 0 : 1 + 2);  // (the forward: padding to 8 bytes and the mbarrier)
}

}  // namespace

// Both kernels: two states per lane (when N ≤ 64, else four) and two channels per thread (CT),
// which share each load of B and C; at N = 16, 128-thread blocks of 32 channels (the backward's
// ~165 registers a thread let three share an SM, so b 8, d 1536 — 384 blocks — is one wave).
// In the backward the two channels' dB/dC terms add in the thread (fused into the products),
// so the sums over the warp's channels take 2 shuffle levels of 4 values a step instead of 3
// of 8; the sums over states take one level more (8 lanes a channel, not 4), a smaller cost
// than the channel levels saved, in both shuffles and shared-memory traffic.
Split backward_split(const ScanShape& s) { return split_for(s, s.states <= 64 ? 2 : kPerLane, 128, 2); }
Split forward_split(const ScanShape& s) { return split_for(s, s.states <= 64 ? 2 : kPerLane, 256, 2); }

// Constants and helpers of every kernel.
// K: the steps a block stages at once (a multiple of the chunk KC).
std::string prelude(const ScanShape& s, const Split& sp, int k_stage, int nbuf) {
  const ScanLayout lay = scan_layout(s);
  auto n = [](int64_t v) { return std::to_string(v); };
  const int64_t nt = sp.threads();
  std::string p = "constexpr int B = " + n(s.batch) + ", D = " + n(s.channels) + ", L = " + n(s.length) +
                  ", G = " + n(s.groups) + ", N = " + n(s.states) + ", PER = " + n(s.channels / s.groups) +
                  ", NS = " + n(sp.ns) + ", NSG = " + n(sp.lanes) + ", NP = NS * NSG, CB = " + n(sp.cb) +
                  ", CT = " + n(sp.ct) + ", NT = " + n(nt) + ", K = " + n(k_stage) + ", KC = " + n(kChunk) +
                  ", NCH = " + n(lay.chunks) +
                  ", NR = (L + K - 1) / K > 0 ? (L + K - 1) / K : 1, SOFTPLUS = " + (s.softplus ? "1" : "0") +
                  ";\n";
  p += "constexpr int D_STRIDE = " + n(s.d_stride) + ", BIAS_STRIDE = " + n(s.bias_stride) + ";\n";
  p += std::string("constexpr bool VEC = ") + (s.vec && s.length % 4 == 0 ? "true" : "false") + ";\n";
  p += "constexpr unsigned MASK = " + std::to_string(nt >= 32 ? 0xffffffffu : (1u << nt) - 1u) + "u;\n";
  p += "constexpr long long NU = (long long)B * D * L;\n";
  p += "constexpr int NBUF = " + n(nbuf) +
       ";  // copies of the staged rows: one computed on while the next is stored\n";
  // Shared rows: [CB][RS] for per-channel rows (RS = K + 4: 16-byte aligned rows, a lane reads
  // four steps at once) and [NSG][BS] for B and C, stored per lane's states [t][s] (BS = K·NS + 4
  // spreads the lanes' float4 reads over the banks). The backward's dB/dC terms, already summed
  // over each warp's channels: [K][WARPS][2·NP], each step's row TSW = WARPS·2·NP + 4 floats
  // (the block sum reads several steps of one term at once: the 4 spreads them over the banks).
  // WL: lanes of a warp, CW: channels of a warp.
  p += "constexpr int RS = K + 4, BS = K * NS + 4, WL = NT < 32 ? NT : 32, CW = WL / NSG, WARPS = NT / WL, "
       "TSW = WARPS * 2 * NP + 4;\n";
  // PAIRED: two channels a thread on at least two lanes a channel; then odd lanes hold theirs in
  // the other order (the SW of the kernels' start, kernels/scan_common.cuh), in both kernels alike.
  p += "constexpr bool PAIRED = CT == 2 && NSG >= 2;\n";
  p += kernel_source("scan_common.cuh", "helpers");
  return p;
}

// The op's operands, first in both kernels' parameters.
const char* const kOperands =
    "const float* __restrict__ u, const float* __restrict__ delta, const float* __restrict__ A, "
    "const float* __restrict__ Bm, const float* __restrict__ Cm, const float* __restrict__ Dskip, "
    "const float* __restrict__ bias, ";

Launch scan_launch(const std::string& name, const ScanShape& s, const Split& sp, bool grad, int nbuf) {
  Launch l;
  l.name = name;
  l.block[0] = static_cast<unsigned>(sp.threads());
  l.grid[0] = static_cast<unsigned>(sp.blocks);
  l.grid[1] = static_cast<unsigned>(s.batch);
  l.shared_bytes = static_cast<unsigned>(scan_shared_floats(sp, grad, nbuf) * 4);
  return l;
}

}  // namespace scan_detail

using namespace scan_detail;

ScanLayout scan_layout(const ScanShape& s) {
  if (s.states > kPerLane * 32)
    throw Error(
        "[cuda] selective_scan keeps a channel's states in the lanes of one warp, four per lane: d_state up "
        "to 128, got " +
        std::to_string(s.states));
  if (s.groups < 1 || s.channels % s.groups != 0)
    throw Error("[cuda] selective_scan: the channels must be a multiple of the groups");
  if (s.batch > 65535)
    throw Error("[cuda] selective_scan: batch " + std::to_string(s.batch) + " must stay below 65536");
  if (s.length > (int64_t{1} << 26))  // a block's rows are indexed with 32-bit offsets (32 channels · L)
    throw Error("[cuda] selective_scan: sequence length " + std::to_string(s.length) +
                " must stay at or below 2^26");
  ScanLayout lay;
  const Split sp = backward_split(s);
  lay.lanes = sp.lanes;
  lay.chunks = std::max<int64_t>((s.length + kChunk - 1) / kChunk, 1);
  lay.channels_per_block = sp.cb;
  lay.blocks = sp.blocks;
  // The kept states in thread groups (the hs_at of the kernels' prelude): padded to NSG·NS
  // states a channel, so both kernels must split them alike.
  const Split fw = forward_split(s);
  if (fw.ns != sp.ns || fw.lanes != sp.lanes || fw.ct != sp.ct)
    throw Error(
        "[cuda] selective_scan: the forward and backward kernels split the states differently (internal)");
  lay.state_floats = s.batch * s.channels * lay.chunks * sp.lanes * sp.ns;
  lay.da_floats = s.batch * s.channels * s.states;
  lay.dbc_floats = lay.blocks * s.batch * 2 * s.states * s.length;
  lay.dd_floats = 2 * s.batch * s.channels;
  return lay;
}
Launch scan_reduce_kernel(const std::string& name, const ScanShape& s) {
  const ScanLayout lay = scan_layout(s);
  const int64_t nb = s.batch * s.groups * s.states * s.length, na = s.channels * s.states;
  const int64_t total = 2 * nb + na + 2 * s.channels;
  Launch l;
  l.name = name;
  l.block[0] = 256;
  l.grid[0] = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 65535));
  std::string src =
      "// selective_scan gradient: dA, dB, dC, dD and dbias from the partials, in a fixed order "
      "(selective_scan.cc)\n" +
      prelude(s, backward_split(s), kChunk);
  src += "constexpr long long NB = " + std::to_string(nb) + "LL, NA = " + std::to_string(na) +
         "LL, TOTAL = " + std::to_string(total) +
         "LL;\nconstexpr int BPG = " + std::to_string(lay.blocks / s.groups) +
         ";  // channel blocks per group\n";
  // The backward stored the dB/dC partials to stay in L2 (evict last); read here for the last
  // time, they leave it first, so that they do not keep the L2 from the kernels after.
  src += kernel_source("scan_reduce.cuh", "helpers");
  src += "extern \"C\" __global__ void " + name +
         "(const float* __restrict__ dA_part, const float* __restrict__ dBC_part, const float* __restrict__ "
         "dDb_part, "
         "float* __restrict__ out) {\n";
  src += kernel_source("scan_reduce.cuh", "body");
  l.source = std::move(src);
  return l;
}

}  // namespace tg::backend::cuda
