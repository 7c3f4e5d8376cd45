// The CPU executor of elementwise kernel groups (passes/fusion.h). A group is a small
// register program: each instruction is a block function of elementwise.cc applied to
// kBlock-element blocks held in per-thread scratch, so a chain like GELU's eight ops or an
// AdamW update reads its inputs from memory once and writes only the values other kernels
// need. Inputs that are dense along the innermost axis are read in place; broadcast and
// strided ones are staged into scratch per block (a scalar broadcast once per chunk).
//
// Work is split into fixed chunks of the flat index range (sized from the group's total
// per-element cost, so cheap groups stay on one thread); chunks of several independent
// groups share one parallel region (make_fused with many specs: the multi-tensor form used
// for the optimizer updates). Results never depend on the thread count: every element is
// computed by the same instruction sequence wherever its chunk runs.
#include <omp.h>

#include <cstring>

#include "backend/cpu/cpu_kernels.h"

namespace tg::backend::cpu {
namespace {

constexpr int64_t kBlock = 512;             // default elements per block: a slot is 2 KiB of f32
constexpr int64_t kMaxBlock = 4096;         // a block grows to whole rows of a row-broadcast input
constexpr int64_t kPreSumRows = 16;         // rows a column reduction adds in float before double
constexpr int64_t kWorkPerChunk = 1 << 18;  // element-ops (op_cost units) a chunk: dwarfs a fork-join

class Group {
 public:
  explicit Group(FusedSpec spec) : spec_(std::move(spec)) {
    numel_ = numel(spec_.shape);
    merge_axes();
    int64_t cost = 0;
    for (const FusedSpec::Instr& i : spec_.instrs) cost += i.cost;
    chunk_ = std::max<int64_t>(block_,
                               (kWorkPerChunk / std::max<int64_t>(1, cost) + block_ - 1) / block_ * block_);
    chunks_ = numel_ == 0 ? 0 : (numel_ + chunk_ - 1) / chunk_;
    slots_ = spec_.inputs.size() + spec_.instrs.size();
    for (const FusedSpec::Reduction& r : spec_.reductions) {
      partial_base_.push_back(static_cast<int64_t>(partials_.size()));
      partials_.resize(partials_.size() + static_cast<size_t>(std::max<int64_t>(1, chunks_) * r.inner));
      row_sums_.resize(partials_.size());
      rows_pending_.resize(spec_.reductions.size() * static_cast<size_t>(std::max<int64_t>(1, chunks_)));
    }
  }
  int64_t chunks() const { return chunks_; }

  /// Merges the reductions' partial sums in chunk order (after every chunk ran).
  void finish() const {
    for (size_t r = 0; r < spec_.reductions.size(); ++r) {
      const FusedSpec::Reduction& red = spec_.reductions[r];
      for (int64_t j = 0; j < red.inner; ++j) {
        double acc = 0;
        for (int64_t c = 0; c < chunks_; ++c)
          acc += partials_[static_cast<size_t>(partial_base_[r] + c * red.inner + j)];
        red.out[j] = narrow_f32(acc);
      }
    }
  }

  void run_chunk(int64_t c) const {
    thread_local std::vector<uint32_t> scratch;  // grows once per thread, then reused
    thread_local std::vector<const std::byte*> ptr;
    thread_local std::vector<int64_t> idx;
    const size_t ni = spec_.inputs.size(), rank = extents_.size();
    if (scratch.size() < slots_ * static_cast<size_t>(block_))
      scratch.resize(slots_ * static_cast<size_t>(block_));
    if (ptr.size() < slots_) ptr.resize(slots_);
    idx.assign(rank, 0);
    auto slot = [&](size_t s) {
      return reinterpret_cast<std::byte*>(scratch.data() + s * static_cast<size_t>(block_));
    };
    for (size_t r = 0; r < spec_.reductions.size(); ++r) {
      const int64_t inner = spec_.reductions[r].inner, at = partial_base_[r] + c * inner;
      std::fill(partials_.data() + at, partials_.data() + at + inner, 0.0);
      std::fill(row_sums_.data() + at, row_sums_.data() + at + inner, 0.0f);
      rows_pending_[r * static_cast<size_t>(chunks_) + static_cast<size_t>(c)] = 0;
    }
    // Scalars broadcast over the whole group: one block of copies, made once per chunk.
    const int64_t widest = std::min(block_, numel_);
    for (size_t i = 0; i < ni; ++i)
      if (scalar_[i]) fill(slot(i), spec_.inputs[i], spec_.inputs[i].view.data, widest);
    // Inputs whose pattern repeats every block (a bias broadcast over rows): one gather per
    // chunk, since every block starts at a multiple of its period.
    if (std::find(periodic_.begin(), periodic_.end(), 1) != periodic_.end()) {
      idx.assign(rank, 0);
      for (size_t i = 0; i < ni; ++i)
        if (periodic_[i]) gather_block(slot(i), i, idx, widest);
    }

    // Blocks are kBlock consecutive flat positions, whatever the innermost extent: inputs laid
    // out like the output are read in place; others (a bias broadcast over rows, a permuted
    // operand) are gathered piece by piece into scratch, so a 64-wide row costs no more
    // per-instruction overhead than a long one.
    const int64_t end = std::min(numel_, (c + 1) * chunk_);
    for (int64_t pos = c * chunk_; pos < end; pos += block_) {
      const int64_t n = std::min(block_, end - pos);
      bool decomposed = false;
      for (size_t i = 0; i < ni; ++i) {
        const FusedSpec::Input& in = spec_.inputs[i];
        if (scalar_[i] || periodic_[i]) {
          ptr[i] = slot(i);
        } else if (dense_[i] && !in.stage) {
          ptr[i] = in.view.data + pos * dtype_size(in.dtype);
        } else {
          if (!decomposed) {
            int64_t rest = pos;
            for (size_t d = rank; d-- > 0;) {
              idx[d] = rest % extents_[d];
              rest /= extents_[d];
            }
            decomposed = true;
          }
          gather_block(slot(i), i, idx, n);
          ptr[i] = slot(i);
        }
      }
      for (size_t k = 0; k < spec_.instrs.size(); ++k) {
        const FusedSpec::Instr& ins = spec_.instrs[k];
        if (ins.reduction >= 0) {
          accumulate(ins.reduction, c, pos,
                     reinterpret_cast<const float*>(ptr[static_cast<size_t>(ins.args[0])]), n);
          continue;
        }
        std::byte* dst = ins.output >= 0
                             ? spec_.outputs[static_cast<size_t>(ins.output)] + pos * dtype_size(ins.dtype)
                             : slot(ni + k);
        auto arg = [&](int a) { return a < 0 ? nullptr : ptr[static_cast<size_t>(a)]; };
        ins.fn(dst, arg(ins.args[0]), arg(ins.args[1]), arg(ins.args[2]), n);
        ptr[ni + k] = dst;
      }
    }
    for (size_t r = 0; r < spec_.reductions.size(); ++r) flush(static_cast<int32_t>(r), c);
  }

 private:
  /// Axes of extent 1 dropped; adjacent axes merged where every input (and the dense
  /// output) steps the outer one exactly as a full sweep of the inner one.
  void merge_axes() {
    const size_t ni = spec_.inputs.size();
    const std::vector<int64_t> dense = contiguous_strides(spec_.shape);
    std::vector<std::vector<int64_t>> out_strides;
    for (size_t d = 0; d < spec_.shape.size(); ++d) {
      const int64_t e = spec_.shape[d];
      if (e == 1) continue;
      std::vector<int64_t> st(ni + 1);
      for (size_t i = 0; i < ni; ++i) st[i] = spec_.inputs[i].view.strides[d];
      st[ni] = dense[d];
      if (!extents_.empty()) {
        bool merge = true;
        for (size_t i = 0; i <= ni; ++i) merge = merge && out_strides.back()[i] == st[i] * e;
        if (merge) {
          extents_.back() *= e;
          out_strides.back() = st;
          continue;
        }
      }
      extents_.push_back(e);
      out_strides.push_back(st);
    }
    if (extents_.empty()) {
      extents_.push_back(1);
      out_strides.push_back(std::vector<int64_t>(ni + 1, 0));
    }
    for (auto& st : out_strides) {
      dense_strides_.push_back(st.back());  // the output is dense: its offset is the flat position
      st.pop_back();
      strides_.push_back(st);
    }
    scalar_.assign(ni, 1);
    dense_.assign(ni, 1);
    for (size_t i = 0; i < ni; ++i)
      for (size_t d = 0; d < extents_.size(); ++d) {
        if (strides_[d][i] != 0) scalar_[i] = 0;
        if (strides_[d][i] != dense_strides_[d]) dense_[i] = 0;
      }
    // Period of each input: the extent of the trailing axes after its last stride-0 outer
    // axis run (an input stepping only the trailing axes repeats every that many positions).
    std::vector<int64_t> period(ni, 0);
    int64_t longest = 0;
    for (size_t i = 0; i < ni; ++i) {
      if (scalar_[i] || dense_[i]) continue;
      size_t lead = 0;
      while (lead < extents_.size() && strides_[lead][i] == 0) ++lead;
      if (lead == 0) continue;
      int64_t p = 1;
      for (size_t d = lead; d < extents_.size(); ++d) p *= extents_[d];
      if (p <= kMaxBlock) {
        period[i] = p;
        longest = std::max(longest, p);
      }
    }
    if (longest > 0) block_ = longest * std::max<int64_t>(1, kBlock / longest);
    periodic_.assign(ni, 0);
    for (size_t i = 0; i < ni; ++i) periodic_[i] = period[i] > 0 && block_ % period[i] == 0;
  }

  /// partial[(at + j) mod inner] += v[j], in row pieces so the inner loop vectorises.
  void accumulate(int32_t r, int64_t c, int64_t at, const float* v, int64_t n) const {
    const int64_t inner = spec_.reductions[static_cast<size_t>(r)].inner;
    double* part = partials_.data() + partial_base_[static_cast<size_t>(r)] + c * inner;
    if (inner == 1) {
      double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t j = 0;
      for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; ++l) acc[l] += static_cast<double>(v[j + l]);
      for (; j < n; ++j) acc[0] += static_cast<double>(v[j]);
      part[0] += ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      return;
    }
    int64_t j = 0, col = at % inner;
    if (col != 0) {  // finish the row the block starts in
      const int64_t len = std::min(inner - col, n);
      for (int64_t t = 0; t < len; ++t) part[col + t] += static_cast<double>(v[t]);
      j = len;
    }
    // Whole rows go into a float row sum that folds into the double partials every
    // kPreSumRows rows (and at the chunk's end): a handful of float adds per column, then one
    // double add, whether a block holds many rows or one.
    float* row = row_sums_.data() + partial_base_[static_cast<size_t>(r)] + c * inner;
    int32_t& pending =
        rows_pending_[static_cast<size_t>(r) * static_cast<size_t>(chunks_) + static_cast<size_t>(c)];
    for (; j + inner <= n; j += inner) {
      const float* src = v + j;
      for (int64_t t = 0; t < inner; ++t) row[t] += src[t];
      if (++pending == kPreSumRows) flush(r, c);
    }
    for (int64_t t = 0; j + t < n; ++t) part[t] += static_cast<double>(v[j + t]);  // a row left open
  }

  /// Folds reduction r's float row sum of chunk c into its double partials.
  void flush(int32_t r, int64_t c) const {
    const int64_t inner = spec_.reductions[static_cast<size_t>(r)].inner;
    int32_t& pending =
        rows_pending_[static_cast<size_t>(r) * static_cast<size_t>(chunks_) + static_cast<size_t>(c)];
    if (pending == 0 || inner == 1) return;
    const int64_t at = partial_base_[static_cast<size_t>(r)] + c * inner;
    double* part = partials_.data() + at;
    float* row = row_sums_.data() + at;
    for (int64_t t = 0; t < inner; ++t) {
      part[t] += static_cast<double>(row[t]);
      row[t] = 0.0f;
    }
    pending = 0;
  }

  /// n elements of input i from the flat position whose merged-axis index is `at`.
  void gather_block(std::byte* dst, size_t i, const std::vector<int64_t>& at, int64_t n) const {
    const FusedSpec::Input& in = spec_.inputs[i];
    const int64_t es = dtype_size(in.dtype);
    const size_t rank = extents_.size(), last = rank - 1;
    int64_t idx_small[16];
    std::vector<int64_t> idx_big;
    int64_t* idx = idx_small;
    if (rank > 16) {
      idx_big.resize(rank);
      idx = idx_big.data();
    }
    int64_t off = 0;
    for (size_t d = 0; d < rank; ++d) {
      idx[d] = at[d];
      off += at[d] * strides_[d][i];
    }
    int64_t done = 0;
    while (done < n) {
      const int64_t count = std::min(extents_[last] - idx[last], n - done);
      const int64_t st = strides_[last][i];
      const std::byte* src = in.view.data + off * es;
      if (st == 1)
        std::memcpy(dst + done * es, src, static_cast<size_t>(count * es));
      else
        gather(dst + done * es, in, src, st, count);
      done += count;
      if (done >= n) break;
      off += count * st;
      idx[last] += count;
      for (size_t d = last; d > 0 && idx[d] == extents_[d]; --d) {
        off += strides_[d - 1][i] - extents_[d] * strides_[d][i];
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  }

  /// n copies of the element at src, moved as raw 4-, 2- (bf16, f16) or 1-byte words.
  template <class E>
  static void fill_as(std::byte* dst, const std::byte* src, int64_t n) {
    E v;
    std::memcpy(&v, src, sizeof(E));
    auto* d = reinterpret_cast<E*>(dst);
    for (int64_t j = 0; j < n; ++j) d[j] = v;
  }
  template <class E>
  static void gather_as(std::byte* dst, const std::byte* src, int64_t st, int64_t n) {
    auto* d = reinterpret_cast<E*>(dst);
    const auto* s = reinterpret_cast<const E*>(src);
    for (int64_t j = 0; j < n; ++j) d[j] = s[j * st];
  }
  static void fill(std::byte* dst, const FusedSpec::Input& in, const std::byte* src, int64_t n) {
    switch (dtype_size(in.dtype)) {
      case 4: return fill_as<uint32_t>(dst, src, n);
      case 2: return fill_as<uint16_t>(dst, src, n);
      default: return fill_as<uint8_t>(dst, src, n);
    }
  }
  static void gather(std::byte* dst, const FusedSpec::Input& in, const std::byte* src, int64_t st,
                     int64_t n) {
    if (st == 0) return fill(dst, in, src, n);
    switch (dtype_size(in.dtype)) {
      case 4: return gather_as<uint32_t>(dst, src, st, n);
      case 2: return gather_as<uint16_t>(dst, src, st, n);
      default: return gather_as<uint8_t>(dst, src, st, n);
    }
  }

  FusedSpec spec_;
  int64_t numel_ = 0, block_ = kBlock, chunk_ = kBlock, chunks_ = 0;
  size_t slots_ = 0;
  std::vector<int64_t> extents_;
  std::vector<std::vector<int64_t>> strides_;  // [axis][input], in elements
  std::vector<char> scalar_;                   // input is one value broadcast everywhere
  std::vector<char> dense_;                    // input laid out exactly like the output
  std::vector<char> periodic_;                 // input repeats with a period dividing block_
  std::vector<int64_t> dense_strides_;         // the output's strides on the merged axes
  mutable std::vector<double> partials_;       // [reduction][chunk][inner]: each chunk writes its own
  mutable std::vector<float> row_sums_;        // same layout: whole rows not yet folded into partials_
  mutable std::vector<int32_t> rows_pending_;  // [reduction][chunk]: rows in row_sums_
  std::vector<int64_t> partial_base_;
};

}  // namespace

Kernel make_fused(std::vector<FusedSpec> specs) {
  auto groups = std::make_shared<std::vector<Group>>();
  std::vector<int64_t> first_chunk;  // prefix sums: group g owns chunks [first[g], first[g+1])
  int64_t total = 0;
  for (FusedSpec& s : specs) {
    groups->emplace_back(std::move(s));
    first_chunk.push_back(total);
    total += groups->back().chunks();
  }
  first_chunk.push_back(total);
  return [groups, first_chunk, total] {
    if (total <= 1) {  // no parallel region at all: even an inactive one has a cost
      for (const Group& g : *groups)
        if (g.chunks() > 0) g.run_chunk(0);
      for (const Group& g : *groups) g.finish();
      return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < total; ++c) {
      const auto g = static_cast<size_t>(std::upper_bound(first_chunk.begin(), first_chunk.end(), c) -
                                         first_chunk.begin() - 1);
      (*groups)[g].run_chunk(c - first_chunk[g]);
    }
    for (const Group& g : *groups) g.finish();
  };
}

}  // namespace tg::backend::cpu
