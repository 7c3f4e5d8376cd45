// Compiling a model into programs and running them.
//
//   auto train = tg::compile_train(model, [&](tg::Tensor x, tg::Tensor y) { … return loss; },
//                                  {.inputs = {{"x", {256, 1}}, {"y", {256, 1}}},
//                                   .optimizer = tg::Adam{.lr = 5e-3}});
//   float loss = train.step({{"x", xs}, {"y", ys}});
//   auto predict = tg::compile_forward(model, [&](tg::Tensor x) { return model(x); },
//                                      {.inputs = {{"x", {1, 1}}}});
//   tg::HostTensor y = predict.run({{"x", x1}});
//
// Programs compiled from one model on one device share its parameter storage: a training
// step is immediately visible to the others. Calls on programs that share storage are
// serialized (never interleaved), so programs may be used from several threads.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tensorgrad/errors.h"
#include "tensorgrad/module.h"
#include "tensorgrad/optim.h"

namespace tg {

struct Device {
  enum class Kind { kCpu, kRef, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;
  static Device cpu() { return {Kind::kCpu, 0}; }
  /// The double-precision reference interpreter (slow; the oracle in tests).
  static Device ref() { return {Kind::kRef, 0}; }
  static Device cuda(int index = 0) { return {Kind::kCuda, index}; }
  /// The fastest usable device: cuda:0 when a GPU backend is available, else cpu.
  static Device best();
  std::string str() const;
  bool operator==(const Device&) const = default;
};

/// How f32 matrix products round on a GPU. kFp32 (the default) computes them in f32; kTf32
/// lets the tensor cores round the inputs to TF32 (10-bit mantissa, f32 range and f32
/// accumulation): several times the throughput for a relative error near 1e-3, as PyTorch's
/// torch.backends.cuda.matmul.allow_tf32. kTf32x3 sits between them (XLA's "HIGH"): products
/// of 1 GFLOP and more run as three TF32 products over a hi + lo split of each operand, close
/// to f32's accuracy (measured 2-6x f32's error, 70-100x below TF32's) at about half f32's time
/// on an H100/H200; attention and smaller products compute in f32. The CPU computes f32
/// products in f32 whatever the setting.
///
/// kBf16 is mixed precision, on every backend: the operands of matrix products and attention
/// are stored as bf16 (8-bit mantissa) and multiplied with f32 accumulation; the gradient
/// flowing into those products is rounded to bf16 too. Everything else (elementwise math,
/// norms, softmax, losses, reductions, gradients, the clipping norm and the optimizer) runs
/// in f32, and the parameters and optimizer moments stay f32: the bf16 operand of a weight is
/// made from its f32 master every step. `keep_f32` (TrainOptions, ForwardOptions) exempts
/// the products of chosen parameters. The README's "Mixed precision" table has the details.
///
/// kF16 is the same policy with IEEE half precision (10-bit mantissa, largest value 65504)
/// in place of bf16. Its narrow range makes small gradients underflow, so a training program
/// under kF16 scales the loss (TrainOptions::loss_scaling, dynamic by default, as PyTorch's
/// GradScaler) and skips steps whose gradients overflowed.
enum class Precision { kFp32, kTf32, kTf32x3, kBf16, kF16 };

/// A tensor's values on the host, row-major.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, Shape shape);  // zero-filled
  static HostTensor f32(std::vector<float> values, Shape shape);
  static HostTensor i32(std::vector<int32_t> values, Shape shape);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return tg::numel(shape_); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  /// Typed views; throw InputError if the dtype differs. On a temporary (`run(…).f32()`)
  /// they return an owning copy instead of a view, so `for (float v : p.run(…).f32())` is safe.
  std::span<float> f32() &;
  std::span<const float> f32() const&;
  std::span<int32_t> i32() &;
  std::span<const int32_t> i32() const&;
  std::vector<float> f32() &&;
  std::vector<int32_t> i32() &&;
  /// First element as a double (for scalars).
  double item() const;
  /// The values as `dtype`: f32 to bf16 or f16 (round to nearest even, as PyTorch), or back
  /// (exact), or bf16 ↔ f16 (through f32: one rounding); i8 to f32 gives the integers themselves
  /// (a quantized weight's values are tg::dequantize_param of them: for 4 bits these are the
  /// packed bytes of two codes each); the same dtype
  /// is a copy. Throws InputError for other pairs.
  HostTensor to(DType dtype) const;

 private:
  uint16_t half_at(int64_t i) const;  // element i of a bf16 or f16 tensor, its bits
  DType dtype_ = DType::kF32;
  Shape shape_{0};  // a default HostTensor is empty (0 elements), not a scalar
  std::vector<uint8_t> bytes_;
};

/// Input data: f32 from float, i32 from int32_t, bool from uint8_t (0/1). Spans, vectors and
/// HostTensors named by the caller are borrowed (they must outlive the view); temporaries are
/// moved into the view, which keeps them alive, so `Feeds f{{"x", make_batch()}}` stays valid.
struct InputView {
  InputView(std::span<const float> v)
      : dtype(DType::kF32), data(v.data()), numel(static_cast<int64_t>(v.size())) {}  // NOLINT
  InputView(const std::vector<float>& v) : InputView(std::span<const float>(v)) {}    // NOLINT
  InputView(std::vector<float>&& v) : InputView(owning(std::move(v))) {}              // NOLINT
  InputView(std::span<const int32_t> v)
      : dtype(DType::kI32), data(v.data()), numel(static_cast<int64_t>(v.size())) {}    // NOLINT
  InputView(const std::vector<int32_t>& v) : InputView(std::span<const int32_t>(v)) {}  // NOLINT
  InputView(std::vector<int32_t>&& v) : InputView(owning(std::move(v))) {}              // NOLINT
  InputView(std::span<const uint8_t> v)
      : dtype(DType::kBool), data(v.data()), numel(static_cast<int64_t>(v.size())) {}     // NOLINT
  InputView(const std::vector<uint8_t>& v) : InputView(std::span<const uint8_t>(v)) {}    // NOLINT
  InputView(std::vector<uint8_t>&& v) : InputView(owning(std::move(v))) {}                // NOLINT
  InputView(const HostTensor& t) : dtype(t.dtype()), data(t.data()), numel(t.numel()) {}  // NOLINT
  InputView(HostTensor&& t) {                                                             // NOLINT
    auto held = std::make_shared<const HostTensor>(std::move(t));
    dtype = held->dtype(), data = held->data(), numel = held->numel(), kept = std::move(held);
  }
  DType dtype;
  const void* data;
  int64_t numel;
  /// What the view owns (a temporary moved into it), or null.
  std::shared_ptr<const void> kept = {};

 private:
  template <typename T>
  static InputView owning(std::vector<T>&& v) {
    auto held = std::make_shared<const std::vector<T>>(std::move(v));
    InputView view{std::span<const T>(*held)};
    view.kept = std::move(held);
    return view;
  }
};

struct Feed {
  std::string name;
  InputView value;
};
using Feeds = std::vector<Feed>;

struct InputSpec {
  std::string name = {};
  Shape shape = {};
  DType dtype = DType::kF32;
};

/// Dynamic loss scaling (TrainOptions::loss_scaling; PyTorch's torch.amp.GradScaler and its
/// defaults). The backward starts from loss · scale, so gradients too small for f16 stay
/// representable in the products' f16 operands; the gradients are divided by the scale
/// before clipping and the update (captures show them unscaled).
///
/// A step whose gradients hold a NaN or an infinity is skipped as with skip_nonfinite, and the
/// scale is multiplied by backoff_factor, but never below 1 (init_scale must be at least 1
/// too): at 1 the products' gradients overflow f16 unscaled, which keep_f32 for that layer or
/// bf16 answers, not a smaller scale (PyTorch's GradScaler has no floor). After
/// growth_interval finite steps in a row it is multiplied by growth_factor.
/// growth_factor = backoff_factor = 1 is a static scale.
///
/// The scale lives on the device ("loss_scale" in training_state().moments, saved with
/// checkpoints; Program::loss_scale() reads it); reset_optimizer() starts it again from
/// init_scale. A training_state saved without scaling restores into a program with it (the
/// scale starts afresh), and the other way round (the scale is ignored). Under data
/// parallelism the gradients are unscaled after their all_reduce; under ZeRO-1 before the
/// reduce-scatter, which then waits for the whole backward. With GradientsOnly the step returns
/// the gradients of an overflowing step as they are (inf or NaN) and does not count it.
struct LossScaling {
  bool enabled = true;
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

struct TrainOptions {
  std::vector<InputSpec> inputs = {};
  /// Seeds the program's random streams (dropout, random_uniform).
  uint64_t seed = 0;
  /// false traces the function in evaluation mode, as inference programs are by default
  /// (tg::is_training() false: no dropout, batch norm reads and keeps its running statistics),
  /// and still trains it: PyTorch's model.eval() with gradients, e.g. to compare a step with
  /// one computed so, or to fine-tune without a checkpoint's dropout.
  bool training = true;
  Optimizer optimizer = Adam{};
  /// Factor on the optimizer's lr per step; empty = constant.
  Schedule schedule = {};
  /// Clip the global L2 norm of all gradients to this value (torch.nn.utils.clip_grad_norm_).
  std::optional<double> clip_grad_norm = {};
  Device device = Device::best();
  /// Debugging aid: false skips the rewriting passes (simplification, constant folding,
  /// unslice sums → concat, CSE), fusion and memory reuse — one kernel per node, one buffer
  /// per value, only dead-code elimination — so results with and without them can be compared.
  bool optimize = true;
  Precision precision = Precision::kFp32;
  /// A step whose gradients hold a NaN or an infinity changes nothing: parameters, optimizer
  /// moments, the step count and the schedule's position stay as they were (PyTorch's
  /// GradScaler skips such steps the same way). step() still returns the loss it computed;
  /// Program::skipped_steps() and last_step_skipped() tell. Each step then reads one flag
  /// back from the device.
  bool skip_nonfinite = false;
  /// Empty: dynamic loss scaling with LossScaling's defaults under Precision::kF16 (whose
  /// gradients underflow without it), none otherwise; `{.enabled = false}` turns it off.
  /// Scaling implies skip_nonfinite.
  std::optional<LossScaling> loss_scaling = {};
  /// Under Precision::kBf16 or kF16: products and attention that read a parameter whose path starts
  /// with one of these (a module path such as "head", or a full parameter path such as
  /// "blocks.0.attn.qkv.weight") stay f32, operands and gradient alike.
  std::vector<std::string> keep_f32 = {};
  /// Freezing: parameters whose path starts with one of these (a module path such as
  /// "model.layers.0", or a full parameter path such as "lm_head.weight"; matched at a '.'
  /// boundary, as keep_f32) are read by the step but not trained: they get no gradient, no
  /// "grad/…" capture, no optimizer moments and no weight decay, and the step never writes
  /// them. An entry that matches no parameter of the model is an InputError.
  /// Freezing is an option of the training program rather than a flag on the Param because
  /// the same model is often trained in phases (fine-tune the head, then everything) and its
  /// parameter values are shared by all its programs: each program says what it trains.
  /// nn::lora_frozen(model) lists everything but the LoRA adapters.
  std::vector<std::string> frozen = {};
  /// Gradient accumulation: one step runs the function on `micro_batches` equal slices of
  /// every input (cut along its first axis, which the count must divide), one after the
  /// other, adds up their gradients and makes one update. The function is traced on the
  /// slices' shapes, and only one slice's activations are alive at a time. The step's loss is
  /// the mean of the slices' losses, so for a loss that is a mean over the batch the step
  /// equals one pass over the whole batch, up to rounding. Captures hold the first slice's
  /// values ("grad/…" the summed gradients); tg::state() values advance once per slice.
  int64_t micro_batches = 1;
  /// Data parallelism over the ranks that tg::distributed::init() joined (one process per
  /// device: Device::cuda(world().local_rank) with NCCL, the CPU with MPI). Each rank feeds
  /// its own share of the global batch (tg::distributed::shard); the gradients are summed over
  /// the ranks and divided by their number inside the step, by collectives over buckets of
  /// about `bucket_bytes`, so every rank applies the same update and the parameters stay equal.
  /// Clipping sees the averaged gradients' norm. step() returns the loss averaged over the
  /// ranks. Every rank must compile the same programs in the same order (compile_train checks
  /// that the ranks' graphs agree). In a world of one it changes nothing.
  bool data_parallel = false;
  int64_t bucket_bytes = int64_t{25} << 20;
  /// ZeRO-1, with data_parallel (an InputError without it, or with tg::GradientsOnly, which has
  /// no state to shard): each rank keeps and updates only its 1/ranks part of the optimizer
  /// state. Per bucket of gradients (about bucket_bytes, never mixing parameters with and
  /// without weight decay), a reduce-scatter gives each rank its part of the mean gradient, the
  /// rank updates that part of the parameters with moments of that part's size, and an
  /// all-gather brings every rank all the new parameters (bitwise equal on every rank). Same
  /// bytes sent as plain data parallelism; memory_report().optimizer_state is 1/ranks of the
  /// unsharded figure, up to each bucket's padding to a multiple of the ranks. The update
  /// equals the unsharded one up to rounding; clipping and skip_nonfinite see every rank's
  /// part. Under it, the optimizer state (training_state(): "adam.m.zero.<bucket>", …) is this
  /// rank's own, so each rank saves and restores its own, and a step's "grad/<param>" captures
  /// are this rank's gradients before the reduction. In a world of one it changes nothing.
  bool shard_optimizer = false;
};

struct ForwardOptions {
  std::vector<InputSpec> inputs = {};
  /// Trace in training mode (dropout active). Inference programs default to eval mode.
  bool training = false;
  uint64_t seed = 0;
  Device device = Device::best();
  /// See TrainOptions::optimize.
  bool optimize = true;
  Precision precision = Precision::kFp32;
  /// See TrainOptions::keep_f32.
  std::vector<std::string> keep_f32 = {};
};

/// Planned memory of a program, in bytes (Program::memory_report()). The step's values share
/// one arena; the per-kind figures are those live at the step where the arena is fullest.
struct MemoryReport {
  // The model's parameters (shared with its other programs); an inference program counts the
  // converted copies it keeps instead of the f32 parameters they come from (bf16 weights).
  int64_t params = 0;
  int64_t optimizer_state = 0;      // moments, step counters
  int64_t inputs = 0;               // input staging and constants
  int64_t activations = 0;          // forward values live at the peak
  int64_t gradients = 0;            // backward values live at the peak
  int64_t optimizer_temps = 0;      // optimizer intermediates live at the peak
  int64_t scratch = 0;              // backend temporaries live at the peak (dense copies)
  int64_t arena = 0;                // the arena's planned size
  int64_t arena_without_reuse = 0;  // what it would be with one buffer per value
  int64_t all_tensors = 0;          // every tensor of the compiled graph at full size, no sharing
  /// What the model holds on this device for all its programs together: every parameter as
  /// stored (f32 masters included, Param::dtype), the inference programs' converted copies and
  /// tg::state tensors (KV caches among them). Not part of planned_peak().
  int64_t model_storage = 0;
  int64_t planned_peak() const { return params + optimizer_state + inputs + arena; }
  /// A small table, one line per kind, in MiB.
  std::string to_string() const;
};

/// Tensors read back by name: captures (tg::capture) and, for training programs, each
/// parameter's gradient of that step as "grad/<param path>" (before clipping).
using Captures = std::map<std::string, HostTensor>;

struct StepOptions {
  /// Read the loss back to the host. Off: step() returns NaN and does not wait for it.
  bool read_loss = true;
  /// If set, filled with every capture and gradient. The first such call prepares a variant
  /// of the program that keeps them; calls without it never pay for captures.
  Captures* captures = nullptr;
};

struct RunOptions {
  /// If set, filled with every capture (see StepOptions::captures).
  Captures* captures = nullptr;
};

struct UploadOptions {
  /// Allow uploading a subset of the parameters (unknown names are still errors).
  bool partial = false;
};

/// Where a training run stands beyond its parameters, to continue it exactly
/// (Program::training_state; save_checkpoint writes it with the parameters).
struct TrainingState {
  std::string optimizer;                      // its kind and settings but lr ("AdamW(beta1=…)")
  std::map<std::string, HostTensor> moments;  // the optimizer's state tensors by name
  std::map<std::string, HostTensor> states;   // the tg::state() tensors the program uses
  int64_t steps = 0;                          // steps taken: the schedule's position
  uint32_t calls = 0;                         // steps and runs: the random streams' counter
  double lr = 0;                              // the base lr (set_lr's)
};

class Program;
namespace detail {
using TracedFn = std::function<Tensor(std::span<const Tensor>)>;
struct ProgramState;
/// Internal (for tests and tools): the graph a program runs, after the passes.
const ir::Graph& compiled_graph(const Program& program);
/// Internal (for tests): the backend executable the program runs.
const backend::Executable& compiled_executable(const Program& program);
}  // namespace detail

class Program {
 public:
  /// Runs forward, backward and the optimizer update (none with tg::GradientsOnly); returns
  /// the loss (train programs).
  float step(const Feeds& feeds, StepOptions options = {});
  /// Runs the program's forward function and returns its output (forward programs).
  HostTensor run(const Feeds& feeds, RunOptions options = {});
  /// Names that captures can return (captures, and "grad/<param>" for training programs).
  std::vector<std::string> capture_names() const;

  /// (Re)initialises every parameter of the model from its Init, seeded: the same seed gives
  /// the same values on every device. Programs start initialised with seed 0.
  void init_params(uint64_t seed);
  /// Sets parameters by name. Unknown names are errors; missing names are errors unless
  /// `options.partial`. Shapes must match; values are f32, or bf16/f16 converted exactly.
  void upload_params(const std::map<std::string, HostTensor>& params, UploadOptions options = {});
  std::map<std::string, HostTensor> download_params() const;
  std::vector<std::string> param_names() const;

  /// Zeroes the optimizer's moments and its step count.
  void reset_optimizer();
  /// Zeroes every tg::state() tensor this program uses (shared with the model's other
  /// programs: a new sequence for a KV cache).
  void reset_state();
  /// A tg::state() tensor's current value (InputError if this program has no such state).
  HostTensor read_state(const std::string& name) const;
  /// Sets a tg::state() tensor (batch norm's running statistics from a file, a cache to
  /// resume from): InputError if this program has no such state or the shape differs; f32
  /// states take f32, bf16 or f16 values (converted exactly).
  void write_state(const std::string& name, const HostTensor& value);
  /// The tg::state() tensors this program uses, by name.
  std::vector<std::string> state_names() const;
  /// Steps left untaken because their gradients were not finite (TrainOptions::skip_nonfinite).
  int64_t skipped_steps() const;
  bool last_step_skipped() const;
  /// The loss scale the next step uses (TrainOptions::loss_scaling), 1 without scaling.
  double loss_scale() const;
  /// Everything but the parameters that the next step depends on (train programs).
  TrainingState training_state() const;
  /// Restores a training_state() of a program with the same optimizer (kind and settings
  /// but lr) and the same state tensors; throws InputError naming what differs, changing
  /// nothing. The next step is then exactly the one the saved program would have taken.
  void restore_training_state(const TrainingState& state);
  /// Sets the optimizer's base lr (the schedule's factor still applies).
  void set_lr(double lr);
  double lr() const;
  /// Optimizer steps taken so far.
  int64_t steps() const;

  /// The compiled graph, one node per line (for debugging).
  std::string ir() const;
  /// What runs per step: one line per kernel (a fused group lists its ops), with shapes.
  std::string describe() const;
  /// Kernels launched per step (what describe() lists).
  int64_t kernel_count() const;
  MemoryReport memory_report() const;
  const Device& device() const;

  /// An empty program (to be assigned later); every call on it throws tg::Error.
  Program() = default;
  explicit Program(std::shared_ptr<detail::ProgramState> state) : state_(std::move(state)) {}

 private:
  detail::ProgramState& state() const;
  friend const ir::Graph& detail::compiled_graph(const Program& program);
  friend const backend::Executable& detail::compiled_executable(const Program& program);
  std::shared_ptr<detail::ProgramState> state_;
};

namespace detail {
Program compile_train(Module& model, const TracedFn& fn, size_t arity, TrainOptions options);
Program compile_forward(Module& model, const TracedFn& fn, size_t arity, ForwardOptions options);

template <size_t>
using AsTensor = Tensor;
template <class F, class Indices>
struct TakesTensors;
template <class F, size_t... I>
struct TakesTensors<F, std::index_sequence<I...>>
    : std::bool_constant<std::is_invocable_r_v<Tensor, F&, AsTensor<I>...>> {};

/// How many Tensor arguments `F` takes (0…8), found by trying each.
template <class F, size_t N = 0>
constexpr size_t tensor_arity() {
  if constexpr (N > 8) {
    static_assert(N <= 8, "the traced function must take 0 to 8 tg::Tensor arguments");
    return 0;
  } else if constexpr (TakesTensors<F, std::make_index_sequence<N>>::value) {
    return N;
  } else {
    return tensor_arity<F, N + 1>();
  }
}

template <class F>
TracedFn erase(F&& fn) {
  constexpr size_t arity = tensor_arity<std::remove_reference_t<F>>();
  return [f = std::forward<F>(fn)](std::span<const Tensor> xs) mutable -> Tensor {
    return [&]<size_t... I>(std::index_sequence<I...>) { return Tensor(f(xs[I]...)); }
    (std::make_index_sequence<arity>());
  };
}
}  // namespace detail

/// Traces `loss_fn` (one Tensor argument per entry of options.inputs, in order; returns the
/// scalar loss), appends autograd and the optimizer, and compiles the training step.
template <class F>
Program compile_train(Module& model, F&& loss_fn, TrainOptions options) {
  constexpr size_t arity = detail::tensor_arity<std::remove_reference_t<F>>();
  return detail::compile_train(model, detail::erase(std::forward<F>(loss_fn)), arity, std::move(options));
}

/// Traces `fn` and compiles it as an inference program; parameters are shared with every
/// other program of `model` on the same device.
template <class F>
Program compile_forward(Module& model, F&& fn, ForwardOptions options) {
  constexpr size_t arity = detail::tensor_arity<std::remove_reference_t<F>>();
  return detail::compile_forward(model, detail::erase(std::forward<F>(fn)), arity, std::move(options));
}

}  // namespace tg
