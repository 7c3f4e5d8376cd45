// finetune: LoRA fine-tuning of a Hugging Face model folder (tg::pretrained::load) on a text
// file. The base weights are frozen (TrainOptions::frozen = nn::lora_frozen) and only the
// adapters train, so the optimizer keeps moments for them alone; under --precision bf16 or f16
// the base is held in that type (pretrained::LoadOptions::dtype), a third of its f32 memory, and
// with --int8 its Linears are quantized to 8 bits (about a quarter; --int4: 4 bits). It reports the
// held-out loss before, during and after training, the training program's planned memory next to what full
// fine-tuning's optimizer state would take, checks that every base weight is bit for bit the
// file's after training, writes the adapters (a safetensors file with the library's parameter
// names, which load_safetensors(…, {.partial = true}) takes back into the adapted model) and the
// loss curve (SVG); with --merge it folds the adapters into the weights (nn::merge_lora), checks
// the merged model's held-out loss against the adapted one's and continues a held-out prompt
// greedily with it; with --save-model it also writes the merged model as a Hugging Face folder
// of the source's architecture (tg::pretrained::save: transformers, and this library, load it)
// and reads it back. --model may also name a llama.cpp GGUF file (its tokenizer in its metadata;
// --save-model then writes a Hugging Face folder with the tokenizer.json that describes it). With
// --save-gguf the merged model (a Llama, Qwen2 or Qwen3) is also written as a GGUF file for
// llama.cpp and ollama (tg::pretrained::save_gguf; F16 matrices, or --gguf-type) and read back.
// --save-adapter writes the adapters as a PEFT adapter folder (tg::pretrained::save_adapter: peft's
// PeftModel.from_pretrained and generate --adapter read it) and reads it back onto the base;
// --adapter starts from one (tg::pretrained::load_adapter) instead of fresh adapters.
//
//   ./finetune --model <folder> --text <file.txt> [--targets q_proj,v_proj] [--rank 8] [--alpha 16]
//              [--dropout 0] [--adapter <PEFT folder>] [--steps 100] [--lr 2e-4] [--weight-decay 0]
//              [--batch 4] [--seq-len min(128, context)] [--holdout 0.1] [--eval-every steps/10]
//              [--eval-batches 8] [--device cpu|cuda] [--precision fp32|bf16|f16] [--int8 | --int4]
//              [--seed 0] [--out finetune_adapter.safetensors] [--plot finetune_loss.svg] [--merge]
//              [--max-new-tokens 32] [--check [--min-drop 0.1]] [--save-adapter <folder>]
//              [--save-model <folder> [--save-dtype f32|bf16|f16]]
//              [--save-gguf <file.gguf> [--gguf-type f16|bf16|f32|q8_0|q4_0]]
//
// The text is tokenized whole with the folder's tokenizer.json and split: the last --holdout of
// its tokens are held out (windows of --seq-len tokens side by side), the rest gives training
// windows at random offsets. --targets defaults to the family's usual choice: q_proj,v_proj for
// Llama, qkv for GPT-2, in_proj,x_proj,out_proj for Mamba (in_proj,out_proj for Mamba-2, and
// both Llama's and those for a hybrid such as Granite 4.0-H). --check turns the checks into the
// exit code: the held-out loss must drop (by the fraction --min-drop,
// default 0: at all), the base weights stay bit-identical, the adapter file read back as written
// and (with --merge) the merged model give the adapted model's loss, and (with --save-model) the
// saved folder load back with the merged weights (rounded to --save-dtype).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "loss_plot.h"
#include "weight_checks.h"

namespace {

namespace fs = std::filesystem;
using example::Args;
using weight_checks::dequantized;
using weight_checks::differing;
using weight_checks::Params;
using weight_checks::relative_diff;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string bytes_str(int64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (b < (1 << 20))
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024);
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  return buf;
}

// The type the frozen base is held in: i8 (its Linears quantized) with --int8 or --int4, else the
// precision's half type, else f32.
tg::DType held_type(tg::Precision p, bool int8) {
  return int8                        ? tg::DType::kI8
         : p == tg::Precision::kBf16 ? tg::DType::kBF16
         : p == tg::Precision::kF16  ? tg::DType::kF16
                                     : tg::DType::kF32;
}

// A number as %g writes it ("16", "0.1"), for metadata.
std::string shortest(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

struct Options {
  std::string folder, text, out, plot, save_model, save_gguf, save_adapter;
  std::string init_adapter;          // --adapter: a PEFT folder to start from
  std::vector<std::string> targets;  // empty: the model family's default
  int64_t rank = 8, steps = 100, batch = 4, seq = 0, eval_every = 0, eval_batches = 8, max_new_tokens = 32;
  double alpha = 16, dropout = 0, lr = 2e-4, weight_decay = 0, holdout = 0.1, min_drop = 0;
  uint32_t seed = 0;
  tg::Device device;
  tg::Precision precision = tg::Precision::kFp32;
  tg::DType save_dtype = tg::DType::kF32, gguf_dtype = tg::DType::kF16;
  int gguf_bits = 8;  // --gguf-type q4_0: 4
  bool merge = false, check = false, int8 = false;
  int bits = 8;  // --int4: 4
};

int64_t whole(const Args& args, const std::string& name, int64_t fallback, int64_t min) {
  const double v = args.num(name, static_cast<double>(fallback));
  if (v != std::floor(v) || v < static_cast<double>(min) || v > 1e15)
    throw std::runtime_error("--" + name + " takes a whole number of at least " + std::to_string(min) +
                             ", not " + args.get(name, ""));
  return static_cast<int64_t>(v);
}

std::vector<std::string> comma_list(const std::string& option, const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item.empty()) throw std::runtime_error("--" + option + " has an empty entry: '" + text + "'");
    out.push_back(item);
  }
  if (out.empty()) throw std::runtime_error("--" + option + " is empty");
  return out;
}

Options parse(const Args& args) {
  args.allow_only({"model",      "text",         "targets",        "rank",      "alpha",    "dropout",
                   "steps",      "lr",           "weight-decay",   "batch",     "seq-len",  "holdout",
                   "eval-every", "eval-batches", "device",         "precision", "seed",     "out",
                   "plot",       "merge",        "max-new-tokens", "check",     "min-drop", "save-model",
                   "save-dtype", "int8",         "save-gguf",      "gguf-type", "int4",     "save-adapter",
                   "adapter"});
  if (!args.has("model") || !args.has("text"))
    throw std::runtime_error(
        "usage: finetune --model <Hugging Face folder or GGUF file> --text <file.txt> [--targets "
        "q_proj,v_proj] "
        "[--rank 8] [--alpha 16] [--dropout 0] [--adapter <PEFT folder to start from>] [--steps 100] [--lr "
        "2e-4] "
        "[--weight-decay 0] [--batch 4] [--seq-len 128] [--holdout 0.1] [--eval-every 10] [--eval-batches 8] "
        "[--device cpu|cuda] [--precision fp32|bf16|f16] [--int8 | --int4] [--seed 0] "
        "[--out finetune_adapter.safetensors] [--plot finetune_loss.svg] [--merge] [--max-new-tokens 32] "
        "[--check [--min-drop 0.1]] [--save-gguf <file> [--gguf-type f16|bf16|f32|q8_0|q4_0]] "
        "[--save-model <folder> [--save-dtype f32|bf16|f16]] [--save-adapter <folder>]");
  Options o;
  o.folder = args.get("model", "");
  o.text = args.get("text", "");
  o.out = args.get("out", "finetune_adapter.safetensors");
  o.plot = args.get("plot", "finetune_loss.svg");
  if (args.has("targets")) o.targets = comma_list("targets", args.get("targets", ""));
  o.rank = whole(args, "rank", o.rank, 1);
  o.steps = whole(args, "steps", o.steps, 1);
  o.batch = whole(args, "batch", o.batch, 1);
  o.seq = args.has("seq-len") ? whole(args, "seq-len", 0, 1) : 0;
  o.eval_every = whole(args, "eval-every", std::max<int64_t>(1, o.steps / 10), 1);
  o.eval_batches = whole(args, "eval-batches", o.eval_batches, 1);
  o.max_new_tokens = whole(args, "max-new-tokens", o.max_new_tokens, 1);
  o.seed = static_cast<uint32_t>(whole(args, "seed", 0, 0));
  o.alpha = args.num("alpha", o.alpha);
  o.dropout = args.num("dropout", o.dropout);
  o.lr = args.num("lr", o.lr);
  o.weight_decay = args.num("weight-decay", o.weight_decay);
  o.holdout = args.num("holdout", o.holdout);
  o.min_drop = args.num("min-drop", o.min_drop);
  if (!(std::isfinite(o.alpha) && o.alpha > 0)) throw std::runtime_error("--alpha must be a positive number");
  if (!(o.dropout >= 0 && o.dropout < 1)) throw std::runtime_error("--dropout must be in [0, 1)");
  if (!(std::isfinite(o.lr) && o.lr > 0)) throw std::runtime_error("--lr must be a positive number");
  if (!(o.weight_decay >= 0 && std::isfinite(o.weight_decay)))
    throw std::runtime_error("--weight-decay must be a number >= 0");
  if (!(o.holdout > 0 && o.holdout <= 0.5)) throw std::runtime_error("--holdout must be in (0, 0.5]");
  if (!(o.min_drop >= 0 && o.min_drop < 1)) throw std::runtime_error("--min-drop must be in [0, 1)");
  const std::string device = args.get("device", "auto");
  if (device != "cpu" && device != "cuda" && device != "auto")
    throw std::runtime_error("--device takes cpu, cuda or auto, not " + device);
  o.device = args.device();
  o.precision = args.precision();
  if (o.precision == tg::Precision::kTf32) throw std::runtime_error("--precision takes fp32, bf16 or f16");
  o.save_model = args.get("save-model", "");
  if (args.has("save-model") && o.save_model.empty()) throw std::runtime_error("--save-model needs a folder");
  const std::string save_dtype = args.get("save-dtype", "f32");
  if (save_dtype != "f32" && save_dtype != "bf16" && save_dtype != "f16")
    throw std::runtime_error("--save-dtype takes f32, bf16 or f16, not " + save_dtype);
  if (args.has("save-dtype") && !args.has("save-model"))
    throw std::runtime_error("--save-dtype needs --save-model");
  std::error_code ec;  // checked before training, not after it
  if (!o.save_model.empty() && fs::exists(o.save_model, ec) && fs::equivalent(o.save_model, o.folder, ec))
    throw std::runtime_error("--save-model " + o.save_model +
                             " is the --model folder; save into another one");
  o.save_dtype = save_dtype == "bf16"  ? tg::DType::kBF16
                 : save_dtype == "f16" ? tg::DType::kF16
                                       : tg::DType::kF32;
  o.init_adapter = args.get("adapter", "");
  for (const char* set : {"targets", "rank", "alpha", "dropout"})
    if (args.has("adapter") && args.has(set))
      throw std::runtime_error(std::string("--") + set + ": --adapter's adapter_config.json sets it");
  o.save_adapter = args.get("save-adapter", "");
  if (args.has("save-adapter") && o.save_adapter.empty())
    throw std::runtime_error("--save-adapter needs a folder");
  o.save_gguf = args.get("save-gguf", "");
  if (args.has("save-gguf") && o.save_gguf.empty()) throw std::runtime_error("--save-gguf needs a file name");
  const std::string gguf_type = args.get("gguf-type", "f16");
  if (gguf_type != "f32" && gguf_type != "bf16" && gguf_type != "f16" && gguf_type != "q8_0" &&
      gguf_type != "q4_0")
    throw std::runtime_error("--gguf-type takes f32, bf16, f16, q8_0 or q4_0, not " + gguf_type);
  if (args.has("gguf-type") && !args.has("save-gguf"))
    throw std::runtime_error("--gguf-type needs --save-gguf");
  o.gguf_bits = gguf_type == "q4_0" ? 4 : 8;
  o.gguf_dtype = gguf_type == "q8_0" || gguf_type == "q4_0" ? tg::DType::kI8
                 : gguf_type == "bf16"                      ? tg::DType::kBF16
                 : gguf_type == "f32"                       ? tg::DType::kF32
                                                            : tg::DType::kF16;
  // The files hold the merged model.
  o.merge = args.has("merge") || !o.save_model.empty() || !o.save_gguf.empty();
  o.check = args.has("check");
  if (args.has("int8") && args.has("int4")) throw std::runtime_error("--int8 and --int4 exclude each other");
  o.int8 = args.has("int8") || args.has("int4");
  o.bits = args.has("int4") ? 4 : 8;
  return o;
}

std::string read_text(const std::string& path) {
  if (!fs::exists(path)) throw std::runtime_error("--text " + path + ": no such file");
  if (!fs::is_regular_file(path)) throw std::runtime_error("--text " + path + " is not a file");
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  if (!f) throw std::runtime_error("--text " + path + " cannot be read");
  if (ss.str().empty()) throw std::runtime_error("--text " + path + " is empty");
  return ss.str();
}

// ---- the text: training tokens and held-out windows ---------------------------------------
struct Corpus {
  std::vector<int32_t> train, held;
};

// The last `holdout` of the tokens (at least one window) are held out; the rest must hold one
// batch of distinct windows.
Corpus split(const std::vector<int32_t>& tokens, const Options& o) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t held =
      std::max(o.seq + 1, static_cast<int64_t>(std::llround(o.holdout * static_cast<double>(n))));
  const int64_t need = held + o.batch * o.seq + 1;
  if (n < need)
    throw std::runtime_error("--text " + o.text + " is too short: it is " + std::to_string(n) +
                             " tokens, and one batch of " + std::to_string(o.batch) + " × " +
                             std::to_string(o.seq) + " training tokens plus the held-out part (" +
                             std::to_string(held) + " tokens) needs " + std::to_string(need) +
                             " (give more text or lower --batch / --seq-len)");
  const auto cut = tokens.end() - held;
  return {{tokens.begin(), cut}, {cut, tokens.end()}};
}

// `batch` windows of `seq` tokens at random offsets, and the tokens after them ([batch, seq] each).
void random_batch(const std::vector<int32_t>& tokens, const Options& o, std::mt19937& rng,
                  std::vector<int32_t>& ids, std::vector<int32_t>& targets) {
  std::uniform_int_distribution<int64_t> offset(0, static_cast<int64_t>(tokens.size()) - o.seq - 1);
  ids.clear();
  targets.clear();
  for (int64_t b = 0; b < o.batch; ++b) {
    const auto first = tokens.begin() + offset(rng);
    ids.insert(ids.end(), first, first + o.seq);
    targets.insert(targets.end(), first + 1, first + 1 + o.seq);
  }
}

// The held-out windows side by side, in batches of the evaluation program's shape; rows past the
// last window have ignored targets, and each batch's mean is weighted by the targets it counts.
struct HeldOut {
  std::vector<std::vector<int32_t>> ids, targets;  // per batch, [batch, seq]
  std::vector<int64_t> counted;                    // targets that are not ignored, per batch
  int64_t windows = 0;

  HeldOut(const std::vector<int32_t>& tokens, const Options& o) {
    constexpr int32_t kIgnore = -100;  // CrossEntropyOptions::ignore_index's default
    windows = std::min((static_cast<int64_t>(tokens.size()) - 1) / o.seq, o.eval_batches * o.batch);
    for (int64_t w = 0; w < windows; ++w) {
      if (w % o.batch == 0) {
        ids.emplace_back();
        targets.emplace_back();
        counted.push_back(0);
      }
      const auto first = tokens.begin() + w * o.seq;
      ids.back().insert(ids.back().end(), first, first + o.seq);
      targets.back().insert(targets.back().end(), first + 1, first + 1 + o.seq);
      counted.back() += o.seq;
    }
    ids.back().resize(static_cast<size_t>(o.batch * o.seq), 0);
    targets.back().resize(static_cast<size_t>(o.batch * o.seq), kIgnore);
  }
  double loss(tg::Program& eval) const {
    double sum = 0;
    int64_t n = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      sum += eval.run({{"ids", ids[i]}, {"targets", targets[i]}}).f32()[0] * static_cast<double>(counted[i]);
      n += counted[i];
    }
    return sum / static_cast<double>(n);
  }
};

// ---- the model -----------------------------------------------------------------------------
std::vector<std::string> default_targets(const tg::pretrained::Model& lm) {
  if (lm.recurrent() && std::holds_alternative<tg::nn::LlamaConfig>(lm.config))
    return {"q_proj", "v_proj", "in_proj", "out_proj"};  // a hybrid's attention and Mamba-2 layers
  if (std::holds_alternative<tg::nn::LlamaConfig>(lm.config)) return {"q_proj", "v_proj"};
  if (std::holds_alternative<tg::nn::GptConfig>(lm.config)) return {"qkv"};
  if (std::get<tg::nn::MambaLMConfig>(lm.config).version == 2) return {"in_proj", "out_proj"};  // Mamba-2
  return {"in_proj", "x_proj", "out_proj"};  // Mamba (its dt_proj's weight is read directly)
}

// Each target must name a Linear as nn::add_lora matches them (the whole path, or its end after
// a '.'); otherwise the error lists the model's Linears by their last name.
void check_targets(tg::Module& model, const std::string& architecture,
                   const std::vector<std::string>& targets) {
  std::vector<std::string> paths;
  std::set<std::string> names;
  for (tg::Module* m : model.modules())
    if (dynamic_cast<tg::nn::Linear*>(m) != nullptr) {
      paths.push_back(m->path());
      names.insert(paths.back().substr(paths.back().rfind('.') + 1));
    }
  for (const std::string& t : targets) {
    const bool found = std::any_of(paths.begin(), paths.end(), [&t](const std::string& p) {
      return p == t || (p.size() > t.size() && p.ends_with(t) && p[p.size() - t.size() - 1] == '.');
    });
    if (found) continue;
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    throw std::runtime_error("unknown target '" + t + "': no nn::Linear of this " + architecture +
                             " is named so (its Linears: " + list + ")");
  }
}

// The same architecture without adapters, for the merged weights.
std::unique_ptr<tg::Module> plain_module(const tg::pretrained::Model& lm) {
  return std::visit(
      [](const auto& config) -> std::unique_ptr<tg::Module> {
        using C = std::decay_t<decltype(config)>;
        if constexpr (std::is_same_v<C, tg::nn::LlamaConfig>) return std::make_unique<tg::nn::Llama>(config);
        if constexpr (std::is_same_v<C, tg::nn::GptConfig>) return std::make_unique<tg::nn::Gpt>(config);
        if constexpr (std::is_same_v<C, tg::nn::MambaLMConfig>)
          return std::make_unique<tg::nn::MambaLM>(config);
        if constexpr (std::is_same_v<C, tg::nn::BertConfig>) return std::make_unique<tg::nn::Bert>(config);
        if constexpr (std::is_same_v<C, tg::nn::ViTConfig>) return std::make_unique<tg::nn::ViT>(config);
        if constexpr (std::is_same_v<C, tg::nn::ClipConfig>) return std::make_unique<tg::nn::Clip>(config);
        if constexpr (std::is_same_v<C, tg::nn::T5Config>) return std::make_unique<tg::nn::T5>(config);
        if constexpr (std::is_same_v<C, tg::nn::WhisperConfig>)
          return std::make_unique<tg::nn::Whisper>(config);
      },
      lm.config);
}

std::pair<tg::Program, tg::Program> compile(const tg::pretrained::Model& lm, const Options& o,
                                            const std::vector<std::string>& frozen) {
  auto loss_fn = [&lm](tg::Tensor ids, tg::Tensor targets) {
    return tg::cross_entropy(lm.logits(ids), targets);
  };
  const std::vector<tg::InputSpec> inputs{{"ids", {o.batch, o.seq}, tg::DType::kI32},
                                          {"targets", {o.batch, o.seq}, tg::DType::kI32}};
  const int64_t warmup = std::max<int64_t>(1, o.steps / 10);
  tg::Program train = tg::compile_train(
      *lm.module, loss_fn,
      {.inputs = inputs,
       .seed = o.seed,
       .optimizer = tg::AdamW{.lr = o.lr, .weight_decay = o.weight_decay},
       .schedule = tg::lr::warmup(warmup, tg::lr::cosine(std::max<int64_t>(1, o.steps - warmup), 0.1)),
       .clip_grad_norm = 1.0,
       .device = o.device,
       .precision = o.precision,
       .frozen = frozen});
  tg::Program eval = tg::compile_forward(*lm.module, loss_fn,
                                         {.inputs = inputs, .device = o.device, .precision = o.precision});
  return {std::move(train), std::move(eval)};
}

// Trainable and total parameter counts, the planned memory, and the optimizer state against
// full fine-tuning's (AdamW's two moments for every parameter).
void report_memory(const tg::Program& train, const tg::Module& model, const std::set<std::string>& adapters,
                   tg::DType held) {
  int64_t total = 0, trained = 0;
  for (const tg::Param* p : model.parameters()) {
    total += tg::numel(p->shape());
    if (adapters.count(p->path())) trained += tg::numel(p->shape());
  }
  const tg::MemoryReport m = train.memory_report();
  std::printf("trainable: %lld adapter values of %lld (%.3f%%)\n", static_cast<long long>(trained),
              static_cast<long long>(total),
              100.0 * static_cast<double>(trained) / static_cast<double>(total));
  std::printf("training program's planned memory:\n%s", m.to_string().c_str());
  std::printf(
      "optimizer state %s (AdamW's m and v of the adapters only); full fine-tuning of the %lld base "
      "values would keep %s, and f32 weights to update\n",
      bytes_str(m.optimizer_state).c_str(), static_cast<long long>(total - trained),
      bytes_str(2 * 4 * (total - trained)).c_str());
  std::printf("the model holds %s on %s (base matrices as %s)\n\n", bytes_str(m.model_storage).c_str(),
              train.device().str().c_str(), tg::dtype_name(held));
}

// ---- training ------------------------------------------------------------------------------
struct Curves {
  loss_plot::Series train, held;
};

// The AdamW steps, with a line every --eval-every steps: the mean training loss since the last
// line, the held-out loss and the training speed. Returns the last held-out loss.
double train_adapters(const Options& o, tg::Program& train, tg::Program& eval, const Corpus& corpus,
                      const HeldOut& held, Curves& curves) {
  std::mt19937 rng(o.seed);
  std::vector<int32_t> ids, targets;
  double interval_sum = 0, eval_seconds = 0, held_loss = 0;
  int64_t interval_steps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = 1; step <= o.steps; ++step) {
    random_batch(corpus.train, o, rng, ids, targets);
    const double loss = train.step({{"ids", ids}, {"targets", targets}});
    curves.train.emplace_back(static_cast<double>(step), loss);
    interval_sum += loss;
    ++interval_steps;
    if (step % o.eval_every != 0 && step != o.steps) continue;
    const double train_seconds = seconds_since(t0) - eval_seconds;
    const auto te = std::chrono::steady_clock::now();
    held_loss = held.loss(eval);
    eval_seconds += seconds_since(te);
    curves.held.emplace_back(static_cast<double>(step), held_loss);
    std::printf("  step %5lld/%lld  train loss %.4f  held-out loss %.4f  %8.0f tokens/s\n",
                static_cast<long long>(step), static_cast<long long>(o.steps),
                interval_sum / static_cast<double>(interval_steps), held_loss,
                static_cast<double>(step * o.batch * o.seq) / train_seconds);
    std::fflush(stdout);
    interval_sum = 0;
    interval_steps = 0;
  }
  std::printf("trained %lld steps in %.1f s (%.1f s of it held-out evaluation)\n",
              static_cast<long long>(o.steps), seconds_since(t0), eval_seconds);
  return held_loss;
}

// Writes the adapter matrices with the run's settings as metadata and reads them back: true when
// the file holds exactly those tensors, bit for bit.
bool save_adapters(const Options& o, const tg::pretrained::Model& lm, const Params& params,
                   const std::set<std::string>& adapters, const std::map<std::string, std::string>& results) {
  Params out;
  for (const std::string& name : adapters) out.emplace(name, params.at(name));
  std::string targets;
  for (const std::string& t : o.targets) targets += (targets.empty() ? "" : ",") + t;
  std::map<std::string, std::string> meta = results;
  meta.insert({{"program", "finetune"},
               {"base_model", o.folder},
               {"architecture", lm.architecture},
               {"steps", std::to_string(o.steps)}});
  if (!o.init_adapter.empty())  // the settings are its adapter_config.json's
    meta["adapter"] = o.init_adapter;
  else
    meta.insert({{"targets", targets},
                 {"rank", std::to_string(o.rank)},
                 {"alpha", shortest(o.alpha)},
                 {"dropout", shortest(o.dropout)}});
  tg::save_safetensors(o.out, out, meta);
  const Params back = tg::read_safetensors(o.out);
  return back.size() == out.size() && differing(out, back).empty();
}

// The adapters as a PEFT folder, read back onto a fresh copy of the base: true when the weights it
// gives merged equal the trained adapters' merged (a module the file fuses holds its parts'
// adapters side by side, which sums the same terms).
bool save_peft_adapter(const Options& o, const tg::pretrained::Model& lm, const Params& trained) {
  tg::pretrained::save_adapter(lm, trained, o.save_adapter, {.base_model = o.folder});
  tg::pretrained::Model back = tg::pretrained::load(o.folder, {.dtype = lm.dtype, .bits = lm.bits});
  const size_t adapted = tg::pretrained::load_adapter(back, o.save_adapter).size();
  const Params want = tg::nn::merge_lora(*lm.module, trained),
               got = tg::nn::merge_lora(*back.module, back.weights);
  double worst = 0;
  for (const auto& [name, t] : want) {
    const auto it = got.find(name);
    if (it == got.end()) return false;
    if (t.dtype() == tg::DType::kI8) continue;  // a quantized base's unadapted weights: as loaded
    worst = std::max(worst, relative_diff(it->second, t));
  }
  std::printf(
      "adapters: a PEFT folder in %s; read back onto the base, its %zu adapted Linears merged are the "
      "trained ones within %.1e\n",
      o.save_adapter.c_str(), adapted, worst);
  return worst < 1e-5;
}

// ---- merging -------------------------------------------------------------------------------
struct MergeResult {
  double held_loss = 0;
  std::vector<int32_t> prompt, continuation;
};

// The adapters folded into the weights, loaded into the architecture without adapters: its
// held-out loss, and a greedy continuation of the held-out text's first tokens.
MergeResult merge_and_generate(const tg::pretrained::Model& lm, const Params& merged_weights,
                               const Options& o, const HeldOut& held, const tg::Tokenizer& tokenizer) {
  tg::pretrained::Model merged{.folder = lm.folder,
                               .architecture = lm.architecture,
                               .config = lm.config,
                               .module = plain_module(lm),
                               .weights = merged_weights,
                               .context = lm.context,
                               .eos_ids = lm.eos_ids,
                               .config_json = lm.config_json};
  // Held as the base was (the merged weights rounded or quantized to it).
  merged.module->store_params_as(lm.dtype, lm.group, lm.bits);
  merged.dtype = lm.dtype;
  merged.bits = lm.bits;
  MergeResult r;
  const std::vector<int32_t>& text = held.ids.front();
  r.prompt.assign(text.begin(),
                  text.begin() + std::min<int64_t>({o.seq, 32, lm.context > 0 ? lm.context / 2 : 32}));
  const int64_t prompt_len = static_cast<int64_t>(r.prompt.size());
  const int64_t max_new =
      lm.context > 0 ? std::min(o.max_new_tokens, lm.context - prompt_len) : o.max_new_tokens;
  auto loss_fn = [&merged](tg::Tensor ids, tg::Tensor targets) {
    return tg::cross_entropy(merged.logits(ids), targets);
  };
  tg::Program eval = tg::compile_forward(
      *merged.module, loss_fn,
      {.inputs = {{"ids", {o.batch, o.seq}, tg::DType::kI32}, {"targets", {o.batch, o.seq}, tg::DType::kI32}},
       .device = o.device,
       .precision = o.precision});
  tg::Generator gen(*merged.module, merged.step(),
                    {.cache_len = prompt_len + max_new, .device = o.device, .precision = o.precision});
  merged.upload(gen.decode());  // shared with `eval`: one model on one device
  r.held_loss = held.loss(eval);
  tg::GenerateOptions greedy{.max_new_tokens = max_new, .temperature = 0};
  if (tokenizer.eos_id())
    greedy.stop_tokens = {*tokenizer.eos_id()};
  else
    greedy.stop_tokens = lm.eos_ids;
  r.continuation = gen.generate(r.prompt, greedy);
  return r;
}

// What the run reads: the tokenizer, the model and the text, checked against each other.
struct Inputs {
  tg::Tokenizer tokenizer;
  tg::pretrained::Model lm;
  Corpus corpus;
};

// Loads the folder and the text; fills in the defaults that depend on the model (--seq-len,
// --targets) and checks everything before anything is compiled.
Inputs load_inputs(Options& o) {
  const bool gguf = fs::is_regular_file(o.folder);  // a GGUF file: its tokenizer is in its metadata
  if (!gguf && !fs::is_directory(o.folder))
    throw std::runtime_error("--model " + o.folder + ": no such folder or GGUF file");
  if (!gguf && !fs::exists(fs::path(o.folder) / "tokenizer.json"))
    throw std::runtime_error(
        o.folder + " has no tokenizer.json: finetune needs the model's tokenizer beside its weights");
  const std::string text = read_text(o.text);
  tg::Tokenizer tokenizer = tg::Tokenizer::load(o.folder);
  const auto t0 = std::chrono::steady_clock::now();
  // The base is frozen: under --precision bf16 or f16 it is held in that type (the products read
  // it as stored), a third of the memory of f32 weights and their converted copies.
  tg::pretrained::Model lm =
      tg::pretrained::load(o.folder, {.dtype = held_type(o.precision, o.int8), .bits = o.bits});
  if (std::holds_alternative<tg::nn::BertConfig>(lm.config) ||
      std::holds_alternative<tg::nn::ViTConfig>(lm.config) ||
      std::holds_alternative<tg::nn::ClipConfig>(lm.config) ||
      std::holds_alternative<tg::nn::T5Config>(lm.config))
    throw std::runtime_error(lm.architecture +
                             " is not a causal language model: finetune trains those on text");
  if (o.seq == 0) o.seq = lm.context > 0 ? std::min<int64_t>(lm.context, 128) : 128;
  if (lm.context > 0 && o.seq > lm.context)
    throw std::runtime_error("--seq-len " + std::to_string(o.seq) +
                             " is longer than the model's context of " + std::to_string(lm.context));
  if (o.targets.empty() && o.init_adapter.empty()) o.targets = default_targets(lm);
  if (o.init_adapter.empty()) check_targets(*lm.module, lm.architecture, o.targets);
  const std::vector<int32_t> tokens = tokenizer.encode(text, /*add_special=*/true);
  const int64_t vocab = std::visit(
      [](const auto& c) -> int64_t {
        using C = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<C, tg::nn::ViTConfig> || std::is_same_v<C, tg::nn::ClipConfig>)
          return 0;  // refused above
        else
          return c.vocab;
      },
      lm.config);
  if (const auto top = std::max_element(tokens.begin(), tokens.end()); top != tokens.end() && *top >= vocab)
    throw std::runtime_error("the tokenizer gives id " + std::to_string(*top) +
                             ", past the model's vocabulary of " + std::to_string(vocab) +
                             ": is tokenizer.json this model's?");
  Corpus corpus = split(tokens, o);
  std::printf("%s from %s, loaded in %.1f s; context %s\n", lm.architecture.c_str(), o.folder.c_str(),
              seconds_since(t0),
              lm.context > 0 ? std::to_string(lm.context).c_str() : "unlimited (recurrent)");
  std::printf("%s: %zu bytes, %zu tokens: %zu to train on, %zu held out\n", o.text.c_str(), text.size(),
              tokens.size(), corpus.train.size(), corpus.held.size());
  return {std::move(tokenizer), std::move(lm), std::move(corpus)};
}

// Attaches the adapters and returns the parameters to freeze (everything else) and the adapters'.
std::pair<std::vector<std::string>, std::set<std::string>> attach_adapters(tg::pretrained::Model& lm,
                                                                           const Options& o) {
  tg::Module& model = *lm.module;
  const std::vector<std::string> adapted =
      o.init_adapter.empty()
          ? tg::nn::add_lora(model,
                             {.targets = o.targets, .rank = o.rank, .alpha = o.alpha, .dropout = o.dropout})
          : tg::pretrained::load_adapter(lm, o.init_adapter);  // its values join lm.weights
  std::vector<std::string> frozen = tg::nn::lora_frozen(model);
  std::set<std::string> adapters;
  for (const tg::Param* p : model.parameters()) adapters.insert(p->path());
  for (const std::string& f : frozen) adapters.erase(f);
  std::string targets;
  for (const std::string& t : o.targets) targets += (targets.empty() ? "" : ", ") + t;
  if (!o.init_adapter.empty())
    std::printf("LoRA from %s: %zu Linears, ranks and scalings from its adapter_config.json\n",
                o.init_adapter.c_str(), adapted.size());
  else
    std::printf("LoRA on %s: %zu Linears, rank %lld, alpha %g (scale %g), dropout %g\n", targets.c_str(),
                adapted.size(), static_cast<long long>(o.rank), o.alpha,
                o.alpha / static_cast<double>(o.rank), o.dropout);
  return {std::move(frozen), std::move(adapters)};
}

// The merged weights as a Hugging Face folder of lm's architecture, read back: true when load()
// gives every merged weight, rounded to --save-dtype, bit for bit.
bool save_merged(const Options& o, const tg::pretrained::Model& lm, const Params& merged) {
  tg::pretrained::save(lm, merged, o.save_model, {.dtype = o.save_dtype});
  const tg::pretrained::Model back = tg::pretrained::load(o.save_model);
  // A quantized base's weights are written dequantized, without their scales (and offsets).
  Params expected;
  for (const auto& [name, t] : merged)
    expected.emplace(name, t.dtype() == tg::DType::kI8 ? dequantized(name, merged) : t);
  for (const auto& [name, t] : merged)
    if (t.dtype() == tg::DType::kI8)
      expected.erase(tg::scale_name(name)), expected.erase(tg::offset_name(name));
  bool same = back.weights.size() == expected.size();
  for (const auto& [name, t] : expected) {
    auto it = back.weights.find(name);
    if (it == back.weights.end()) return false;
    const tg::HostTensor want = t.to(o.save_dtype).to(tg::DType::kF32);
    same =
        same && it->second.shape() == want.shape() &&
        std::memcmp(it->second.data(), want.data(), static_cast<size_t>(want.numel()) * sizeof(float)) == 0;
  }
  std::printf("saved the merged model to %s (%s, %s weights)%s\n", o.save_model.c_str(),
              back.architecture.c_str(), tg::dtype_name(o.save_dtype),
              same ? "; it loads back with the merged weights" : "; it did NOT load back as written");
  return same;
}

// The merged model as a llama.cpp GGUF file (pretrained::save_gguf), read back: true when load()
// gives every merged weight as written (an f32 file: bit for bit; else within its rounding) and
// the file's tokenizer encodes the text as the model's does.
bool save_merged_gguf(const Options& o, const Inputs& in, const Params& merged) {
  tg::pretrained::save_gguf(in.lm, merged, o.save_gguf, {.dtype = o.gguf_dtype, .bits = o.gguf_bits});
  const tg::pretrained::Model back = tg::pretrained::load(o.save_gguf);
  // Relative to each matrix's largest value: Q4_0 moves a value by up to its block's max / 8.
  const double tolerance = o.gguf_dtype == tg::DType::kF32   ? 0
                           : o.gguf_dtype == tg::DType::kF16 ? 1e-3
                           : o.gguf_bits == 4                ? 0.13
                                                             : 1e-2;
  bool same = true;
  for (const auto& [name, t] : back.weights) {
    auto it = merged.find(name);
    if (it == merged.end()) return false;
    const tg::HostTensor want =
        it->second.dtype() == tg::DType::kI8 ? dequantized(name, merged) : it->second.to(tg::DType::kF32);
    same = same && relative_diff(t, want) <= tolerance;
  }
  const std::string sample = "the cat sat.";
  same = same && tg::Tokenizer::load(o.save_gguf).encode(sample, true) == in.tokenizer.encode(sample, true);
  std::printf(
      "saved the merged model as GGUF to %s (%s, %s matrices)%s\n", o.save_gguf.c_str(),
      back.architecture.c_str(),
      o.gguf_dtype == tg::DType::kI8 ? (o.gguf_bits == 4 ? "Q4_0" : "Q8_0") : tg::dtype_name(o.gguf_dtype),
      same ? "; it loads back with the merged weights and the tokenizer"
           : "; it did NOT load back as written");
  return same;
}

// After training: the base weights' bits, the adapter file, the loss curve and, with --merge, the
// merged model. Returns the checks that failed.
std::vector<std::string> finish(const Options& o, const Inputs& in, const Params& trained,
                                const std::set<std::string>& adapters, const HeldOut& held,
                                const Curves& curves, double before, double after) {
  std::vector<std::string> failures;
  if (!(after < before * (1 - o.min_drop)))
    failures.push_back(o.min_drop > 0 ? "the held-out loss dropped by less than --min-drop"
                                      : "the held-out loss did not drop");
  // The base: every loaded tensor but --adapter's start values.
  const std::vector<std::string> changed = differing(in.lm.weights, trained, adapters);
  const size_t base = static_cast<size_t>(std::count_if(
      in.lm.weights.begin(), in.lm.weights.end(), [&](const auto& w) { return !adapters.count(w.first); }));
  if (changed.empty()) {
    std::printf("base weights: all %zu tensors bit-identical to the folder's (as loaded: %s)\n", base,
                tg::dtype_name(in.lm.dtype));
  } else {
    std::printf("base weights: %zu of %zu tensors changed, the first %s\n", changed.size(), base,
                changed.front().c_str());
    failures.push_back("base weights changed");
  }
  char before_text[32], after_text[32];
  std::snprintf(before_text, sizeof before_text, "%.4f", before);
  std::snprintf(after_text, sizeof after_text, "%.4f", after);
  const bool saved =
      save_adapters(o, in.lm, trained, adapters,
                    {{"held_out_loss_before", before_text}, {"held_out_loss_after", after_text}});
  std::printf("adapters: %zu tensors written to %s%s\n", adapters.size(), o.out.c_str(),
              saved ? "" : " (they did NOT read back as written)");
  if (!saved) failures.push_back("the adapter file did not read back as written");
  if (!o.save_adapter.empty() && !save_peft_adapter(o, in.lm, trained))
    failures.push_back("the PEFT adapter folder did not read back as trained");
  char title[200];
  std::snprintf(title, sizeof title, "LoRA (rank %lld) on %s: held-out %.3f → %.3f",
                static_cast<long long>(o.rank), fs::path(o.text).filename().c_str(), before, after);
  if (!loss_plot::write_svg(o.plot, title, curves.train, curves.held, before, "held-out loss before"))
    throw std::runtime_error("cannot write " + o.plot);
  std::printf("loss curve: %s\n", o.plot.c_str());
  if (!o.merge) return failures;

  const Params merged = tg::nn::merge_lora(*in.lm.module, trained);  // W + (alpha/rank)·B·A, once
  const MergeResult m = merge_and_generate(in.lm, merged, o, held, in.tokenizer);
  const double diff = std::fabs(m.held_loss - after) / after;
  std::printf(
      "\nmerged (W + (alpha/rank)·B·A, adapters dropped): held-out loss %.6f, adapted %.6f (relative %.1e)\n",
      m.held_loss, after, diff);
  if (diff > (o.precision != tg::Precision::kFp32 ? 2e-2 : 1e-4))
    failures.push_back("the merged model's held-out loss differs from the adapted model's");
  std::printf("greedy continuation of held-out text by the merged model:\n%s[%s]\n",
              in.tokenizer.decode(m.prompt, /*skip_special=*/true).c_str(),
              in.tokenizer.decode(m.continuation, /*skip_special=*/true).c_str());
  if (!o.save_model.empty() && !save_merged(o, in.lm, merged))
    failures.push_back("the saved folder did not load back with the merged weights");
  if (!o.save_gguf.empty() && !save_merged_gguf(o, in, merged))
    failures.push_back("the GGUF file did not load back with the merged model's tokens and weights");
  return failures;
}

int run(Options o) {
  Inputs in = load_inputs(o);
  const HeldOut held(in.corpus.held, o);
  const auto [frozen, adapters] = attach_adapters(in.lm, o);

  const auto t0 = std::chrono::steady_clock::now();
  auto [train, eval] = compile(in.lm, o, frozen);
  train.init_params(o.seed);                              // the adapters' A (B starts at zero)
  train.upload_params(in.lm.weights, {.partial = true});  // the base weights (and --adapter's values)
  std::printf("compiled for %s (%s) in %.1f s; batch %lld × %lld tokens, %lld steps, AdamW lr %g\n",
              train.device().str().c_str(),
              o.precision == tg::Precision::kBf16  ? "bf16"
              : o.precision == tg::Precision::kF16 ? "f16"
                                                   : "fp32",
              seconds_since(t0), static_cast<long long>(o.batch), static_cast<long long>(o.seq),
              static_cast<long long>(o.steps), o.lr);
  report_memory(train, *in.lm.module, adapters, in.lm.dtype);

  Curves curves;
  const double before = held.loss(eval);
  curves.held.emplace_back(0.0, before);
  std::printf("held-out loss before fine-tuning: %.4f nats/token (%lld windows of %lld tokens)\n", before,
              static_cast<long long>(held.windows), static_cast<long long>(o.seq));
  const double after = train_adapters(o, train, eval, in.corpus, held, curves);
  std::printf("held-out loss: %.4f before, %.4f after (%+.1f%%)\n", before, after,
              100 * (after / before - 1));

  const std::vector<std::string> failures =
      finish(o, in, train.download_params(), adapters, held, curves, before, after);
  for (const std::string& f : failures) std::printf("%s: %s\n", o.check ? "FAIL" : "warning", f.c_str());
  if (o.check && failures.empty()) std::printf("check passed\n");
  return o.check && !failures.empty() ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(Args::parse(argc, argv)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "finetune: %s\n", e.what());
    return 1;
  }
}
