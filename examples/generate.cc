// generate: text from a Hugging Face model folder (config.json, model.safetensors or its shards,
// tokenizer.json) — a Llama-family, GPT-2 or Mamba checkpoint (tg::pretrained::load) — or from a
// llama.cpp GGUF file (Llama, Mixtral, Qwen2, Qwen3, Qwen-MoE, Phi-3, Gemma 1-3 or GPT-2, its
// tokenizer in its metadata), streamed to the terminal as it is sampled, then the speed in tokens/s. With
// --chat the text is a conversation with an instruction-tuned model, in the prompt format of the folder's
// chat template (tg::ChatTemplate): one turn with --prompt, or turn after turn read from stdin.
//
//   ./generate --model <folder> --prompt "Once upon a time" [--max-new-tokens 100]
//              [--temperature 0.8] [--top-k 0] [--top-p 0.95] [--min-p 0]
//              [--repetition-penalty 1] [--seed 0]
//              [--device cpu|cuda] [--precision fp32|bf16|f16] [--adapter <PEFT folder>]
//              [--beams 4 [--length-penalty 1]]
//   ./generate --model <instruct folder> --chat [--system "Be brief."] [--prompt "Hi!"] …
//
// --temperature 0 is greedy. Generation stops at the tokenizer's end-of-sequence token (else the
// config's eos_token_id; with --chat any of those and the template's eos_token), after
// --max-new-tokens, or when prompt and text fill the model's context. A prompt longer than the
// context is an error, as is a folder without tokenizer.json (or, with --chat, without a chat
// template); a prompt that fits but leaves less room than --max-new-tokens asks for is clamped,
// with a note on stderr saying how many new tokens fit (--help says so too).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <system_error>

#include "args.h"

namespace {

constexpr const char* kUsage =
    "usage: generate --model FOLDER --prompt TEXT [--max-new-tokens 100] [--temperature 0.8]\n"
    "                [--top-k 0] [--top-p 0.95] [--min-p 0] [--repetition-penalty 1] [--seed 0]\n"
    "                [--device cpu|cuda] [--precision fp32|bf16|f16] [--int8 | --int4]\n"
    "                [--adapter ADAPTER_FOLDER] [--beams N [--length-penalty 1]]\n"
    "       generate --model FOLDER --chat [--system TEXT] [--prompt TEXT] [the options above]\n"
    "\n"
    "Continues TEXT with a Hugging Face model folder (config.json, model.safetensors or its shards,\n"
    "tokenizer.json) of an architecture tg::pretrained::load takes (Llama and its relatives: Mistral,\n"
    "Qwen, Phi-3, Gemma, Granite, OLMo, Mixtral, Qwen-MoE, GPT-NeoX, Phi, StableLM, StarCoder 2;\n"
    "GPT-2; Mamba), or a llama.cpp GGUF file (FOLDER then names the .gguf file: a Llama, Mixtral,\n"
    "Qwen2, Qwen3, Qwen-MoE, Phi-3, Gemma or GPT-2 model in F32, F16, BF16 or ggml's quantized\n"
    "types, read as their values; a GPTQ or AWQ checkpoint folder likewise),\n"
    "streaming the tokens. Under --precision bf16 or f16 the model's matrices are held in that\n"
    "type (a third of the memory of f32 weights and their converted copies). --int8 quantizes\n"
    "the weights of the products to 8 bits (a scale per 32 values; the embeddings held as bf16):\n"
    "less memory than bf16; decoding reads them as stored. --int4 quantizes them to 4 bits (a scale\n"
    "and an offset per 32 values; a GGUF file's Q4_0, Q4_1 and Q4_K matrices kept exactly, and a\n"
    "4-bit GPTQ or AWQ folder's codes in its own groups).\n"
    "--adapter reads a PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors:\n"
    "peft's save_pretrained, or finetune --save-adapter) onto the model, folded into its weights\n"
    "(kept apart over --int8 or --int4 weights, which merging would quantize again).\n"
    "--beams N searches N beams instead of sampling (Hugging Face's num_beams): it prints every\n"
    "hypothesis with its score (summed log-probability over length^--length-penalty), best first.\n"
    "--temperature 0 is greedy; --top-k 0, --top-p 1 and --min-p 0 sample among every token.\n"
    "--repetition-penalty P > 1 makes every token already in the text less likely (Hugging Face's\n"
    "rule: a logit s becomes s / P when positive, s * P otherwise).\n"
    "\n"
    "The context: a Llama or GPT-2 model reads at most its context of tokens (config.json's\n"
    "max_position_embeddings or n_positions); a Mamba model has no such limit.\n"
    "  * A prompt of more tokens than the context is an error.\n"
    "  * A prompt that fits, but whose tokens plus --max-new-tokens exceed the context, is clamped:\n"
    "    a note on stderr says how many new tokens fit, and generation stops when the context is full.\n"
    "Generation also stops at the end-of-sequence token.\n"
    "\n"
    "--chat: the model is an instruction-tuned (chat) model and its folder has a chat template\n"
    "(chat_template.jinja, or tokenizer_config.json's chat_template). --prompt is then the user's\n"
    "message, put into the model's prompt format with --system as the system message; without\n"
    "--prompt each line of stdin is a user turn of one conversation (the model answers after each;\n"
    "an empty line or the end of input ends it), within a context of at most 4096 tokens; when it\n"
    "outgrows that, its oldest turns leave it (the system message stays).\n";

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The model's values: a quantized weight counts its shape's (not its stored bytes), its scales and
// offsets none.
int64_t parameter_count(const tg::pretrained::Model& lm) {
  int64_t n = 0;
  for (const tg::Param* p : lm.module->parameters())
    if (p->scales() == nullptr) n += tg::numel(p->shape());
  return n;
}

// Generates after `ids`, printing the text as it grows: after each token, what decoding prompt
// and tokens so far adds to what is shown. Decoding the whole, not each token alone, keeps a
// SentencePiece-style token's leading space (a lone "▁world" decodes to "world"); bytes of a
// character split over two tokens are whole once both are printed. Returns the new tokens.
std::vector<int32_t> stream(tg::Generator& gen, const tg::Tokenizer& tokenizer,
                            const std::vector<int32_t>& ids, tg::GenerateOptions options) {
  std::vector<int32_t> so_far = ids;
  size_t shown = tokenizer.decode(so_far, /*skip_special=*/true).size();
  options.on_token = [&](int64_t, int32_t token) {
    so_far.push_back(token);
    const std::string text = tokenizer.decode(so_far, /*skip_special=*/true);
    if (text.size() > shown) std::fwrite(text.data() + shown, 1, text.size() - shown, stdout);
    shown = std::max(shown, text.size());
    std::fflush(stdout);
    return true;
  };
  return gen.generate(ids, options);
}

// A prompt (`what`) of n tokens in a cache of cache_len positions: an error when it does not fit,
// a note when fewer than max_new new tokens do.
void check_fits(int64_t n, int64_t max_new, int64_t context, int64_t cache_len, const char* what) {
  if (context > 0 && n > context)
    throw std::runtime_error(std::string(what) + " is " + std::to_string(n) +
                             " tokens, more than the model's context of " + std::to_string(context) +
                             " (see --help)");
  if (n > cache_len)
    throw std::runtime_error(std::string(what) + " is " + std::to_string(n) + " tokens, more than the " +
                             std::to_string(cache_len) + " this conversation keeps (see --help)");
  if (n + max_new > cache_len) {
    // tg::Generator stops a sequence once prompt and new tokens fill the cache; a prompt that
    // fills it whole still gets one token (the last one sampled needs no position).
    const int64_t fit = n < cache_len ? cache_len - n : 1;
    std::fprintf(stderr,
                 "generate: note: %s's %lld tokens and --max-new-tokens %lld exceed %s of %lld: at most %lld "
                 "new token%s\n",
                 what, static_cast<long long>(n), static_cast<long long>(max_new),
                 cache_len == context ? "the model's context" : "the positions kept",
                 static_cast<long long>(cache_len), static_cast<long long>(fit), fit == 1 ? "" : "s");
  }
}

// Why a turn of `out` new tokens after n prompt tokens ended.
const char* why_stopped(size_t out, int64_t max_new, int64_t n, int64_t context, int64_t cache_len) {
  if (static_cast<int64_t>(out) == max_new) return "--max-new-tokens";
  if (n + static_cast<int64_t>(out) < cache_len) return "end of sequence";
  return cache_len == context ? "the model's context" : "the positions kept";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    for (int i = 1; i < argc; ++i) {
      if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
        std::printf("%s", kUsage);
        return 0;
      }
    }
    const example::Args args = example::Args::parse(argc, argv);
    args.allow_only({"model", "prompt", "max-new-tokens", "temperature", "top-k", "top-p", "min-p",
                     "repetition-penalty", "seed", "device", "precision", "chat", "system", "int8", "int4",
                     "adapter", "beams", "length-penalty"});
    const bool chat = args.has("chat");
    if (!args.has("model") || (!args.has("prompt") && !chat)) {
      std::fprintf(stderr, "generate: --model and --prompt (or --chat) are required\n%s", kUsage);
      return 2;
    }
    if (args.has("system") && !chat) throw std::runtime_error("--system is the system message of --chat");
    const double max_new_arg = args.num("max-new-tokens", 100);
    if (!(max_new_arg >= 1 && max_new_arg <= 1e9))
      throw std::runtime_error("--max-new-tokens must be from 1 to 1e9, not " +
                               args.get("max-new-tokens", ""));
    const auto max_new = static_cast<int64_t>(max_new_arg);
    const std::string folder = args.get("model", "");
    // The tokenizer and the template first: without them there is nothing to generate, however
    // good the weights.
    std::error_code ec;
    const bool gguf = std::filesystem::is_regular_file(folder, ec);  // its tokenizer is in its metadata
    if (!gguf && !std::filesystem::exists(std::filesystem::path(folder) / "tokenizer.json", ec))
      throw std::runtime_error(
          folder + " has no tokenizer.json: generate needs the model's tokenizer beside its weights");
    const tg::Tokenizer tokenizer = tg::Tokenizer::load(folder);
    std::optional<tg::ChatTemplate> templ;
    if (chat) templ = tg::ChatTemplate::load(folder);

    // Under --precision bf16 or f16 the matrices are held in that type: the products read them
    // as they are, with no f32 master and no converted copy beside them (a third of the memory).
    const tg::Precision precision = args.precision();
    if (precision == tg::Precision::kTf32) throw std::runtime_error("--precision takes fp32, bf16 or f16");
    if (args.has("int8") && args.has("int4"))
      throw std::runtime_error("--int8 and --int4 exclude each other");
    const tg::DType held = args.has("int8") || args.has("int4") ? tg::DType::kI8
                           : precision == tg::Precision::kBf16  ? tg::DType::kBF16
                           : precision == tg::Precision::kF16   ? tg::DType::kF16
                                                                : tg::DType::kF32;
    auto t0 = std::chrono::steady_clock::now();
    tg::pretrained::Model lm =
        tg::pretrained::load(folder, {.dtype = held, .bits = args.has("int4") ? 4 : 8});
    if (args.has("adapter")) {
      const std::string adapter = args.get("adapter", "");
      const bool merge = held != tg::DType::kI8;
      const std::vector<std::string> adapted = tg::pretrained::load_adapter(lm, adapter, {.merge = merge});
      std::printf("LoRA adapter %s on %zu Linears (%s)\n", adapter.c_str(), adapted.size(),
                  merge ? "folded into the weights" : "kept apart from the quantized weights");
    }
    std::printf("%s from %s: %.4g M parameters, context %s, loaded in %.1f s\n", lm.architecture.c_str(),
                folder.c_str(), static_cast<double>(parameter_count(lm)) / 1e6,
                lm.context > 0 ? std::to_string(lm.context).c_str() : "unlimited (recurrent)",
                seconds_since(t0));

    std::vector<tg::ChatMessage> messages;
    if (args.has("system")) messages.push_back({"system", args.get("system", "")});
    // The prompt: with --chat the user's message in the template's format (which adds the
    // special tokens it wants); else the text as the model saw text in training (add_special:
    // Llama 3's <|begin_of_text|> first).
    const bool interactive = chat && !args.has("prompt");
    std::vector<int32_t> ids;
    if (!interactive) {
      const std::string prompt = args.get("prompt", "");
      if (chat) messages.push_back({"user", prompt});
      ids = chat ? tokenizer.encode(templ->render(messages), false) : tokenizer.encode(prompt, true);
      if (ids.empty()) throw std::runtime_error("the prompt encodes to no tokens");
    }
    const auto n = static_cast<int64_t>(ids.size());
    // Caches only as long as this text needs (a Llama's context can be 128k positions); a
    // conversation of turns still to come keeps up to 4096.
    const int64_t room = interactive ? 4096 : n + max_new;
    const int64_t cache_len = lm.context > 0 ? std::min(lm.context, room) : room;
    if (!interactive) check_fits(n, max_new, lm.context, cache_len, "the prompt");

    tg::GenerateOptions options = args.sampling();
    options.max_new_tokens = max_new;
    if (tokenizer.eos_id()) options.stop_tokens = {*tokenizer.eos_id()};
    if (chat || options.stop_tokens.empty())  // a chat model's end of turn may be any of these
      options.stop_tokens.insert(options.stop_tokens.end(), lm.eos_ids.begin(), lm.eos_ids.end());
    if (chat && templ->special_tokens().eos_token)
      if (const auto id = tokenizer.token_to_id(*templ->special_tokens().eos_token))
        options.stop_tokens.push_back(*id);

    const int64_t beams = args.has("beams") ? static_cast<int64_t>(args.num("beams", 1)) : 0;
    if (args.has("beams") && (beams < 1 || beams > 64 || interactive))
      throw std::runtime_error("--beams takes 1 to 64 beams, with --prompt");
    if (args.has("length-penalty") && !args.has("beams"))
      throw std::runtime_error("--length-penalty needs --beams");
    if (beams > 0 && (args.has("temperature") || args.has("top-k") || args.has("top-p") ||
                      args.has("min-p") || args.has("repetition-penalty")))
      throw std::runtime_error("--beams searches without sampling: drop the sampling options");

    t0 = std::chrono::steady_clock::now();
    tg::Generator gen(*lm.module, lm.step(),
                      {.batch = std::max<int64_t>(beams, 1),
                       .cache_len = cache_len,
                       .device = args.device(),
                       .precision = precision});
    lm.upload(gen.decode());  // the prefill program shares the decode program's parameters
    gen.prepare(options);     // the repetition penalty's programs, if it asks for one
    std::printf("compiled for %s in %.1f s; the model holds %.1f MiB there (%s matrices)",
                gen.decode().device().str().c_str(), seconds_since(t0),
                static_cast<double>(gen.decode().memory_report().model_storage) / (1 << 20),
                tg::dtype_name(held));
    if (interactive)
      std::printf("; one user turn per line, an empty line ends\n\n");
    else
      std::printf(chat ? "; %lld prompt tokens from the chat template\n\n" : "; %lld prompt tokens\n\n",
                  static_cast<long long>(n));

    if (beams > 0) {
      t0 = std::chrono::steady_clock::now();
      const std::vector<tg::BeamHypothesis> found =
          gen.beam_search(ids, {.max_new_tokens = max_new,
                                .length_penalty = args.num("length-penalty", 1),
                                .stop_tokens = options.stop_tokens});
      const double s = seconds_since(t0);
      for (size_t i = 0; i < found.size(); ++i)
        std::printf("[%zu] score %.4f, %zu tokens%s:\n%s%s\n\n", i + 1, found[i].score,
                    found[i].tokens.size(), found[i].ended ? ", ended" : "",
                    chat ? "" : args.get("prompt", "").c_str(),
                    tokenizer.decode(found[i].tokens, /*skip_special=*/true).c_str());
      std::printf("%zu hypotheses of %lld beams in %.2f s\n", found.size(), static_cast<long long>(beams), s);
      return 0;
    }
    if (!interactive) {
      if (!chat) std::printf("%s", args.get("prompt", "").c_str());
      std::fflush(stdout);
      t0 = std::chrono::steady_clock::now();
      const std::vector<int32_t> out = stream(gen, tokenizer, ids, options);
      const double s = seconds_since(t0);
      std::printf("\n\n%zu tokens in %.2f s: %.1f tokens/s (the prompt's prefill included; stopped by %s)\n",
                  out.size(), s, static_cast<double>(out.size()) / s,
                  why_stopped(out.size(), max_new, n, lm.context, cache_len));
      return 0;
    }
    // A conversation: each turn renders the whole of it again and generates the answer. When it
    // no longer leaves room for an answer, its oldest turns (after the system message) leave it.
    const size_t first = messages.size();
    for (std::string line;
         std::printf("> "), std::fflush(stdout), std::getline(std::cin, line) && !line.empty();) {
      messages.push_back({"user", line});
      std::vector<int32_t> turn = tokenizer.encode(templ->render(messages), false);
      while (static_cast<int64_t>(turn.size()) >= cache_len && messages.size() - first > 1) {
        // A user turn and its answer go together: templates may insist that roles alternate.
        const auto at = messages.begin() + static_cast<std::ptrdiff_t>(first);
        messages.erase(at, at + (messages[first + 1].role == "assistant" ? 2 : 1));
        std::fprintf(stderr, "generate: note: the oldest turn left the conversation to fit %lld positions\n",
                     static_cast<long long>(cache_len));
        turn = tokenizer.encode(templ->render(messages), false);
      }
      const auto tn = static_cast<int64_t>(turn.size());
      check_fits(tn, max_new, lm.context, cache_len, "the conversation");
      t0 = std::chrono::steady_clock::now();
      const std::vector<int32_t> out = stream(gen, tokenizer, turn, options);
      const double s = seconds_since(t0);
      std::printf("\n[%zu tokens, %.1f tokens/s; stopped by %s]\n", out.size(),
                  static_cast<double>(out.size()) / s,
                  why_stopped(out.size(), max_new, tn, lm.context, cache_len));
      messages.push_back({"assistant", tokenizer.decode(out, /*skip_special=*/true)});
    }
    std::printf("\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "generate: %s\n", e.what());
    return 1;
  }
}
