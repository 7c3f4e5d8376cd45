// The CUDA executable: arena, kernel compilation, graph capture and the Executable interface
// (see executable.h; the steps come from the schedule through emit.h).
#include "backend/cuda/executable.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "backend/cuda/emit.h"
#include "distributed/communicator.h"
#include "tensorgrad/errors.h"
#include "util/switches.h"

namespace tg::backend::cuda {

using ir::Op;

void CudaContext::make_current() const { check(driver().cuCtxSetCurrent(info.context), "cuCtxSetCurrent"); }

CudaExecutable::CudaExecutable(std::shared_ptr<CudaContext> ctx, const ir::Graph& g, const Bindings& bindings,
                               const PrepareOptions& options)
    : ctx_(std::move(ctx)), comm_(options.communicator) {
  require_communicator(g, comm_, "cuda");
  ctx_->make_current();
  profile_ = env::is_set(env::Switch::kProfile);
  auto t = std::chrono::steady_clock::now();
  auto phase = [&](const char* what) {  // TG_PROFILE: where preparation spends its time
    const auto now = std::chrono::steady_clock::now();
    if (profile_)
      std::fprintf(stderr, "[cuda prepare] %-28s %8.1f ms\n", what,
                   std::chrono::duration<double, std::milli>(now - t).count());
    t = now;
  };
  const CudaCapabilities caps(ctx_->info, options);
  const passes::Schedule schedule = passes::schedule(g, caps, {options.fuse, options.reuse_memory});
  phase("schedule");
  prog_ = Emitter(ctx_->info, g, schedule, bindings, options).run();
  phase("emit");
  arena_ = DeviceMemory(static_cast<size_t>(std::max<int64_t>(prog_.memory.arena, kAlign)));
  err_ = DeviceMemory(kAlign);
  for (void*& staging : staging_) {
    if (prog_.input_bytes == 0) break;
    check(driver().cuMemAllocHost(&staging, static_cast<size_t>(prog_.input_bytes)),
          "cuMemAllocHost (input staging)");
    std::memset(staging, 0, static_cast<size_t>(prog_.input_bytes));
  }
  plan_readback();
  compile_kernels(options.early_launch);
  phase("NVRTC (or cache) and load");
  tune_products();
  phase("cuBLASLt tuning");
  for (CUevent& e : done_)
    check(driver().cuEventCreate(&e, 2 /* CU_EVENT_DISABLE_TIMING */), "cuEventCreate");
  const auto sides =
      std::count_if(prog_.steps.begin(), prog_.steps.end(), [](const Step& s) { return s.side; });
  side_events_.assign(sides > 0 ? static_cast<size_t>(sides) + 1 : 0,
                      nullptr);  // a fork per side step, a join
  for (CUevent& e : side_events_)
    check(driver().cuEventCreate(&e, 2 /* CU_EVENT_DISABLE_TIMING */), "cuEventCreate");
  for (const Step& s : prog_.steps)
    if (s.kind == Step::Kind::kCollective) {
      for (int k = 0; k < 2; ++k) {
        coll_events_.push_back(nullptr);
        check(driver().cuEventCreate(&coll_events_.back(), 2 /* CU_EVENT_DISABLE_TIMING */), "cuEventCreate");
      }
    }
  // Without a kernel that can report a bad index the error word stays 0: no memset and no copy
  // back of it in the graph (two nodes fewer on the step's critical path).
  for (const Step& s : prog_.steps)
    for (const Arg& a : s.args) uses_err_ = uses_err_ || a.err;
  for (int k = 0; k < 2; ++k) capture(k);
  phase("graph capture");
}

CUdeviceptr CudaExecutable::address(const Place& p) const {
  const CUdeviceptr base =
      p.buf >= 0 ? arena_.get() + static_cast<CUdeviceptr>(prog_.bufs[static_cast<size_t>(p.buf)].offset)
                 : p.fixed;
  return base + static_cast<CUdeviceptr>(p.offset);
}

/// Each product picks the fastest of cuBLASLt's candidate algorithms on the real buffers.
void CudaExecutable::tune_products() {
  bool needs_workspace = false;
  for (const Step& s : prog_.steps) needs_workspace = needs_workspace || s.kind == Step::Kind::kMatmul;
  if (needs_workspace) workspace_ = DeviceMemory(kWorkspaceBytes);
  for (Step& s : prog_.steps)
    if (s.kind == Step::Kind::kMatmul) {
      const CUdeviceptr a = address(s.args[0].place), b = address(s.args[1].place),
                        out = address(s.args[2].place),
                        bias = s.bias_arg >= 0 ? address(s.args[static_cast<size_t>(s.bias_arg)].place) : 0,
                        res = s.residual_arg >= 0 ? address(s.args[static_cast<size_t>(s.residual_arg)].place)
                                                  : 0;
      if (!s.matmul_hi) {
        s.matmul->tune(a, b, out, workspace_.get(), ctx_->stream, bias, res ? 1.0f : 0.0f, res);
        continue;
      }
      s.matmul->tune(a, b, out, workspace_.get(), ctx_->stream, 0, res ? 1.0f : 0.0f, res);
      s.matmul_hi->tune(a + static_cast<CUdeviceptr>(s.hi_offset[0]),
                        b + static_cast<CUdeviceptr>(s.hi_offset[1]), out, workspace_.get(), ctx_->stream,
                        bias, 1.0f);
    }
}

CudaExecutable::~CudaExecutable() {
  if (profile_ && executions_ > 0) {
    double total = 0;
    for (const auto& [label, e] : profile_ms_) total += e.first;
    std::fprintf(stderr, "[cuda profile] %zu steps per execution, %.3f ms per execution (%lld executions)\n",
                 prog_.steps.size(), total / static_cast<double>(executions_),
                 static_cast<long long>(executions_));
    for (const auto& [label, e] : profile_ms_)
      std::fprintf(stderr, "  %-20s %6lld launches  %9.3f ms  %5.1f%%\n", label.c_str(),
                   static_cast<long long>(e.second / executions_), e.first / static_cast<double>(executions_),
                   100.0 * e.first / std::max(total, 1e-9));
  }
  const Driver& d = driver();
  d.cuCtxSetCurrent(ctx_->info.context);
  d.cuStreamSynchronize(ctx_->stream);
  for (int k = 0; k < 2; ++k) {
    if (graph_exec_[k]) d.cuGraphExecDestroy(static_cast<CUgraphExec>(graph_exec_[k]));
    if (graph_[k]) d.cuGraphDestroy(static_cast<CUgraph>(graph_[k]));
    if (staging_[k]) d.cuMemFreeHost(staging_[k]);
    if (done_[k]) d.cuEventDestroy(done_[k]);
  }
  for (CUevent e : side_events_) d.cuEventDestroy(e);
  for (CUevent e : coll_events_) d.cuEventDestroy(e);
  if (readback_) d.cuMemFreeHost(readback_);
}

void CudaExecutable::plan_readback() {
  constexpr int64_t kMaxReadback = 64 << 10;  // larger outputs are copied when read
  readback_bytes_ = 16;                       // the error word, padded
  for (const auto& [node, place] : prog_.outputs) {
    const LoweredProgram::Node& s = prog_.nodes[static_cast<size_t>(node)];
    const int64_t bytes = numel(s.shape) * dtype_size(s.dtype);
    if (bytes > kMaxReadback) continue;
    readback_offset_[node] = readback_bytes_;
    readback_bytes_ += (bytes + 15) / 16 * 16;
  }
  check(driver().cuMemAllocHost(&readback_, static_cast<size_t>(readback_bytes_)),
        "cuMemAllocHost (readback)");
  std::memset(readback_, 0, static_cast<size_t>(readback_bytes_));
}

void CudaExecutable::enqueue_readback() {
  const Driver& d = driver();
  if (uses_err_)
    check(d.cuMemcpyDtoHAsync(readback_, err_.get(), sizeof(int), ctx_->stream), "cuMemcpyDtoHAsync");
  for (const auto& [node, offset] : readback_offset_) {
    const LoweredProgram::Node& s = prog_.nodes[static_cast<size_t>(node)];
    const int64_t bytes = numel(s.shape) * dtype_size(s.dtype);
    if (bytes > 0)
      check(d.cuMemcpyDtoHAsync(static_cast<std::byte*>(readback_) + offset, address(prog_.outputs.at(node)),
                                static_cast<size_t>(bytes), ctx_->stream),
            "cuMemcpyDtoHAsync");
  }
}

/// Programmatic dependent launch (sm_90+): each kernel lets the next one launch once all of its
/// blocks run (griddepcontrol.launch_dependents), and waits for the one before it to finish and
/// its writes to be visible (griddepcontrol.wait) before it reads or writes any memory, so the
/// next kernel's launch and block scheduling overlap this one's tail instead of following it.
/// A kernel that defines TG_PDL_OWN_WAIT places TG_PDL_WAIT() itself (gemv_kernel: after
/// prefetching weights no kernel of the step writes) and gets only the trigger. Returns the source to
/// compile, and in `early` whether it may be launched so; sources with other than one kernel stay as they
/// are.
std::string pdl_source(const std::string& source, int sm_major, bool& early) {
  static const bool off = env::equals(env::Switch::kCudaPdl, "off");
  early = false;
  // The kernel's signature starts a line (a comment may quote one, after its "//").
  const std::string sig = "extern \"C\" __global__";
  size_t g = std::string::npos;
  int kernels = 0;
  for (size_t at = source.find(sig); at != std::string::npos; at = source.find(sig, at + 1))
    if (at == 0 || source[at - 1] == '\n') g = at, ++kernels;
  if (off || sm_major < 9 || kernels != 1) return source;
  const size_t brace = source.find('{', g);
  if (brace == std::string::npos) return source;
  early = true;
  const bool own_wait = source.find("#define TG_PDL_OWN_WAIT") != std::string::npos;
  return "#define TG_PDL_WAIT() asm volatile(\"griddepcontrol.wait;\" ::: \"memory\")\n"
         "#define TG_PDL_LAUNCH() asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\")\n" +
         source.substr(0, brace + 1) + (own_wait ? " TG_PDL_LAUNCH();" : " TG_PDL_WAIT(); TG_PDL_LAUNCH();") +
         source.substr(brace + 1);
}

void CudaExecutable::compile_kernels(bool early_launch) {
  // Identical sources compile and load once.
  std::unordered_map<std::string, int32_t> unique;
  std::vector<KernelSource> sources;
  std::vector<unsigned> shared;
  std::vector<char> early;
  for (Step& s : prog_.steps) {
    if (s.kind != Step::Kind::kKernel) continue;
    auto [it, fresh] = unique.emplace(s.launch.source, static_cast<int32_t>(sources.size()));
    if (fresh) {
      bool e = false;
      sources.push_back({s.launch.name, early_launch ? pdl_source(s.launch.source, ctx_->info.sm_major, e)
                                                     : s.launch.source});
      shared.push_back(s.launch.shared_bytes);
      early.push_back(e);
    } else {
      shared[static_cast<size_t>(it->second)] =
          std::max(shared[static_cast<size_t>(it->second)], s.launch.shared_bytes);
    }
    s.kernel = it->second;
  }
  const std::vector<std::vector<char>> cubins =
      compile_cubins(sources, ctx_->info.sm_major, ctx_->info.sm_minor);
  for (size_t i = 0; i < cubins.size(); ++i) kernels_.emplace_back(cubins[i], sources[i].name, shared[i]);
  kernel_early_ = std::move(early);
  // Sources are no longer needed (describe() names ops, not code).
  for (Step& s : prog_.steps) s.launch.source.clear();
}

void CudaExecutable::enqueue_step(const Step& s, CUstream stream) {
  const Driver& d = driver();
  switch (s.kind) {
    case Step::Kind::kKernel: {
      std::vector<CUdeviceptr> ptrs;
      ptrs.reserve(s.args.size());
      for (const Arg& a : s.args) ptrs.push_back(a.err ? err_.get() : address(a.place));
      std::vector<void*> params;
      for (CUdeviceptr& p : ptrs) params.push_back(&p);
      long long n = s.launch_n;
      if (s.launch_n >= 0) params.push_back(&n);
      kernels_[static_cast<size_t>(s.kernel)].launch(s.launch.grid, s.launch.block, s.launch.shared_bytes,
                                                     stream, params.data(),
                                                     kernel_early_[static_cast<size_t>(s.kernel)] != 0);
      return;
    }
    case Step::Kind::kMatmul: {
      const CUdeviceptr a = address(s.args[0].place), b = address(s.args[1].place),
                        out = address(s.args[2].place),
                        bias = s.bias_arg >= 0 ? address(s.args[static_cast<size_t>(s.bias_arg)].place) : 0,
                        res = s.residual_arg >= 0 ? address(s.args[static_cast<size_t>(s.residual_arg)].place)
                                                  : 0;
      if (!s.matmul_hi) {
        s.matmul->run(a, b, out, workspace_.get(), stream, bias, res ? 1.0f : 0.0f, res);
        return;
      }
      s.matmul->run(a, b, out, workspace_.get(), stream, 0, res ? 1.0f : 0.0f, res);
      s.matmul_hi->run(a + static_cast<CUdeviceptr>(s.hi_offset[0]),
                       b + static_cast<CUdeviceptr>(s.hi_offset[1]), out, workspace_.get(), stream, bias,
                       1.0f);
      return;
    }
    case Step::Kind::kMemset:
      check(d.cuMemsetD8Async(address(s.args[0].place), 0, static_cast<size_t>(s.bytes), stream),
            "cuMemsetD8Async");
      return;
    case Step::Kind::kCollective: {
      const CUdeviceptr out = address(s.args.back().place);
      const CUdeviceptr in = address(s.args[0].place);
      const int64_t count = s.coll_count[0];
      switch (s.coll_op) {
        case ir::Op::kReduceScatter:
          comm_->reduce_scatter_device(reinterpret_cast<const void*>(in), reinterpret_cast<void*>(out), count,
                                       DType::kF32, stream);
          return;
        case ir::Op::kAllGather:
          comm_->all_gather_device(reinterpret_cast<const void*>(in), reinterpret_cast<void*>(out), count,
                                   DType::kF32, stream);
          return;
        case ir::Op::kRankShard:  // this rank's part of the input: a copy, no communication
          if (count > 0)
            check(d.cuMemcpyDtoDAsync(out, in + static_cast<CUdeviceptr>(comm_->rank() * count * 4),
                                      static_cast<size_t>(count * 4), stream),
                  "cuMemcpyDtoDAsync");
          return;
        default: break;  // all_reduce
      }
      comm_->group_start();
      for (size_t k = 0; k < s.coll_count.size(); ++k)
        comm_->all_reduce_device(reinterpret_cast<const void*>(address(s.args[k].place)),
                                 reinterpret_cast<void*>(out + static_cast<CUdeviceptr>(s.coll_offset[k])),
                                 s.coll_count[k], s.coll_dtype[k], stream);
      comm_->group_end();
      return;
    }
  }
}

/// One step's work in stream order: upload the inputs, clear the error word, every step, then
/// the updates (after every read of the old values).
void CudaExecutable::enqueue_all(int k) {
  const Driver& d = driver();
  enqueue_prologue(k);
  // A side step waits for the main stream's work before it (an event recorded there), then
  // runs on the side stream; the main stream waits for the side stream before the updates.
  size_t forks = 0;
  // Collective i (in step order) forks the communication stream off the main one with event
  // 2i and ends with event 2i+1, which its first reader (Step::waits) and the updates wait for.
  std::vector<size_t> coll_index(prog_.steps.size(), 0);
  size_t collectives = 0;
  for (size_t i = 0; i < prog_.steps.size(); ++i)
    if (prog_.steps[i].kind == Step::Kind::kCollective) coll_index[i] = collectives++;
  for (size_t i = 0; i < prog_.steps.size(); ++i) {
    const Step& s = prog_.steps[i];
    for (int32_t c : s.waits)
      check(d.cuStreamWaitEvent(ctx_->stream, coll_events_[2 * coll_index[static_cast<size_t>(c)] + 1], 0),
            "cuStreamWaitEvent");
    if (s.on_comm) {
      CUevent fork = coll_events_[2 * coll_index[i]], end = coll_events_[2 * coll_index[i] + 1];
      check(d.cuEventRecord(fork, ctx_->stream), "cuEventRecord");
      check(d.cuStreamWaitEvent(ctx_->comm, fork, 0), "cuStreamWaitEvent");
      enqueue_step(s, ctx_->comm);
      check(d.cuEventRecord(end, ctx_->comm), "cuEventRecord");
      continue;
    }
    if (!s.side) {
      enqueue_step(s, ctx_->stream);
      continue;
    }
    check(d.cuEventRecord(side_events_[forks], ctx_->stream), "cuEventRecord");
    check(d.cuStreamWaitEvent(ctx_->side, side_events_[forks], 0), "cuStreamWaitEvent");
    ++forks;
    enqueue_step(s, ctx_->side);
  }
  if (forks > 0) {
    check(d.cuEventRecord(side_events_[forks], ctx_->side), "cuEventRecord");
    check(d.cuStreamWaitEvent(ctx_->stream, side_events_[forks], 0), "cuStreamWaitEvent");
  }
  for (size_t i = 0; i < prog_.steps.size(); ++i)
    if (prog_.steps[i].on_comm)
      check(d.cuStreamWaitEvent(ctx_->stream, coll_events_[2 * coll_index[i] + 1], 0), "cuStreamWaitEvent");
  enqueue_updates();
  enqueue_readback();
}

void CudaExecutable::enqueue_prologue(int k) {
  const Driver& d = driver();
  if (prog_.input_bytes > 0)
    check(d.cuMemcpyHtoDAsync(prog_.inputs.get(), staging_[k], static_cast<size_t>(prog_.input_bytes),
                              ctx_->stream),
          "cuMemcpyHtoDAsync");
  if (uses_err_) check(d.cuMemsetD32Async(err_.get(), 0, 1, ctx_->stream), "cuMemsetD32Async");
}

void CudaExecutable::enqueue_updates() {
  for (const UpdateCopy& u : prog_.update_copies)
    check(driver().cuMemcpyDtoDAsync(address(u.dst), address(u.src), static_cast<size_t>(u.bytes),
                                     ctx_->stream),
          "cuMemcpyDtoDAsync");
}

void CudaExecutable::capture(int k) {
  const Driver& d = driver();
  CUstream stream = ctx_->stream;
  constexpr int kCaptureThreadLocal = 1;
  check(d.cuStreamBeginCapture(stream, kCaptureThreadLocal), "cuStreamBeginCapture");
  try {
    enqueue_all(k);
  } catch (...) {
    CUgraph broken = nullptr;
    d.cuStreamEndCapture(stream, &broken);
    if (broken) d.cuGraphDestroy(broken);
    throw;
  }
  CUgraph graph = nullptr;
  check(d.cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
  graph_[k] = graph;
  CUgraphExec exec = nullptr;
  // With side steps the kernel nodes keep the priorities of the streams they were captured on.
  constexpr unsigned long long kUseNodePriority = 8;  // CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY
  check(d.cuGraphInstantiate(&exec, graph, side_events_.empty() ? 0 : kUseNodePriority),
        "cuGraphInstantiate");
  graph_exec_[k] = exec;
}

void CudaExecutable::wait_staging(int k) {
  if (!launched_[k]) return;
  check(driver().cuEventSynchronize(done_[k]), "cuEventSynchronize (the step failed)");
  launched_[k] = false;
}

void CudaExecutable::set_input(int32_t node, const void* host) {
  auto it = prog_.input_offset.find(node);
  if (it == prog_.input_offset.end()) throw Error("[cuda] %" + std::to_string(node) + " is not an input");
  ctx_->make_current();
  const int k = next_;
  wait_staging(k);  // the launch two steps back may still be uploading from this buffer
  const LoweredProgram::Node& s = prog_.nodes[static_cast<size_t>(node)];
  std::memcpy(static_cast<std::byte*>(staging_[k]) + it->second, host,
              static_cast<size_t>(numel(s.shape) * dtype_size(s.dtype)));
  staged_version_[k][node] = ++input_version_[node];
}

void CudaExecutable::execute() {
  ctx_->make_current();
  const Driver& d = driver();
  const int k = next_;
  // Inputs set for an earlier step only: bring their latest bytes over from the other buffer.
  for (const auto& [id, offset] : prog_.input_offset) {
    const uint64_t latest = input_version_[id];
    if (latest == 0) throw Error("[cuda] input %" + std::to_string(id) + " was never set");
    if (staged_version_[k][id] == latest) continue;
    wait_staging(k);
    const LoweredProgram::Node& s = prog_.nodes[static_cast<size_t>(id)];
    std::memcpy(static_cast<std::byte*>(staging_[k]) + offset,
                static_cast<const std::byte*>(staging_[1 - k]) + offset,
                static_cast<size_t>(numel(s.shape) * dtype_size(s.dtype)));
    staged_version_[k][id] = latest;
  }
  wait_staging(k);
  if (!profile_) {
    check(d.cuGraphLaunch(static_cast<CUgraphExec>(graph_exec_[k]), ctx_->stream), "cuGraphLaunch");
  } else {
    profile_execution(k);
  }
  check(d.cuEventRecord(done_[k], ctx_->stream), "cuEventRecord");
  launched_[k] = true;
  next_ = 1 - k;
}

/// TG_PROFILE=1: the same work launched step by step, timed with events.
void CudaExecutable::profile_execution(int k) {
  const Driver& d = driver();
  CUstream stream = ctx_->stream;
  enqueue_prologue(k);
  std::vector<CUevent> events(prog_.steps.size() + 1);
  for (CUevent& e : events) check(d.cuEventCreate(&e, 0), "cuEventCreate");
  check(d.cuEventRecord(events[0], stream), "cuEventRecord");
  for (size_t i = 0; i < prog_.steps.size(); ++i) {
    enqueue_step(prog_.steps[i], stream);  // one at a time, side steps too
    check(d.cuEventRecord(events[i + 1], stream), "cuEventRecord");
  }
  enqueue_updates();
  enqueue_readback();
  check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  const bool detail = env::equals(env::Switch::kProfile, "2") && executions_ == 3;
  for (size_t i = 0; i < prog_.steps.size(); ++i) {
    float ms = 0;
    d.cuEventElapsedTime(&ms, events[i], events[i + 1]);
    const Step& s = prog_.steps[i];
    std::string label = s.kind == Step::Kind::kMatmul       ? (s.matmul_hi ? "matmul 3xTF32" : "matmul")
                        : s.kind == Step::Kind::kMemset     ? "memset"
                        : s.kind == Step::Kind::kCollective ? ir::op_name(s.coll_op)
                        : s.nodes.empty()                   ? "copy"
                        : s.nodes.size() > 1                ? "fused"
                                             : ir::op_name(prog_.nodes[static_cast<size_t>(s.nodes[0])].op);
    auto& e = profile_ms_[label];
    e.first += ms;
    e.second += 1;
    if (detail)
      std::fprintf(stderr, "  step %4zu %8.4f ms %8.1f GB/s %7.1f TFLOP/s  %s\n", i, ms,
                   static_cast<double>(s.moved) / (ms * 1e6), static_cast<double>(s.flops) / (ms * 1e9),
                   step_line(s).c_str());
  }
  for (CUevent e : events) d.cuEventDestroy(e);
  ++executions_;
}

void CudaExecutable::read_output(int32_t node, void* host) {
  auto it = prog_.outputs.find(node);
  if (it == prog_.outputs.end()) throw Error("[cuda] %" + std::to_string(node) + " is not an output");
  ctx_->make_current();
  const Driver& d = driver();
  check(d.cuStreamSynchronize(ctx_->stream), "cuStreamSynchronize (the step failed)");
  launched_[0] = launched_[1] = false;
  int err = 0;
  std::memcpy(&err, readback_, sizeof err);
  if (err != 0)
    throw InputError(
        "[cuda] the step read an index out of range (a gather/scatter_add index, an update_slice offset, an "
        "attention_at position, a cross_entropy target or grouped_matmul offsets that do not rise from 0 to "
        "x's rows); "
        "run it on Device::cpu() for the exact position");
  const LoweredProgram::Node& s = prog_.nodes[static_cast<size_t>(node)];
  const auto bytes = static_cast<size_t>(numel(s.shape) * dtype_size(s.dtype));
  if (auto rb = readback_offset_.find(node); rb != readback_offset_.end())
    std::memcpy(host, static_cast<const std::byte*>(readback_) + rb->second, bytes);
  else
    check(d.cuMemcpyDtoH(host, address(it->second), bytes), "cuMemcpyDtoH");
}

std::string CudaExecutable::step_line(const Step& s) const {
  std::ostringstream out;
  switch (s.kind) {
    case Step::Kind::kKernel: out << (s.nodes.size() > 1 ? "fused" : s.nodes.empty() ? "copy" : ""); break;
    case Step::Kind::kMatmul: out << (s.matmul_hi ? "cublasLt 3xTF32" : "cublasLt"); break;
    case Step::Kind::kMemset: out << "memset"; break;
    case Step::Kind::kCollective: out << "collective"; break;
  }
  for (int32_t id : s.nodes) {
    out << " " << ir::op_name(prog_.nodes[static_cast<size_t>(id)].op) << "%" << id;
    if (!prog_.nodes[static_cast<size_t>(id)].name.empty())
      out << "'" << prog_.nodes[static_cast<size_t>(id)].name << "'";
    out << shape_str(prog_.nodes[static_cast<size_t>(id)].shape);
  }
  if (s.kind == Step::Kind::kKernel)
    out << " grid " << s.launch.grid[0] << "x" << s.launch.grid[1] << "x" << s.launch.grid[2] << " block "
        << s.launch.block[0] << "x" << s.launch.block[1];
  if (s.flops) out << " " << s.flops << " flops";
  if (s.side) out << " (side stream)";
  return out.str();
}

std::string CudaExecutable::describe() const {
  std::ostringstream out;
  for (size_t i = 0; i < prog_.steps.size(); ++i) out << "#" << i << " " << step_line(prog_.steps[i]) << "\n";
  return out.str();
}

}  // namespace tg::backend::cuda
