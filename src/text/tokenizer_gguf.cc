// The tokenizer a GGUF file carries in its metadata (tokenizer.ggml.*), as the tokenizer.json
// that describes the same tokenizer, which Tokenizer::load then reads as it reads a file:
//   tokenizer.ggml.model "gpt2": byte-level BPE (tokens, merges); the pre-tokenizer named by
//     tokenizer.ggml.pre: GPT-2's regex ("gpt-2"), Llama 3's Split ("llama-bpe", "llama3",
//     "llama-v3", with BPE's ignore_merges as Llama 3's file has it) or Qwen2's (NFC first,
//     "qwen2", "deepseek-r1-qwen"); llama.cpp's default (no key), another split, is not read;
//   tokenizer.ggml.model "llama": SentencePiece BPE (Llama 2, Mistral, TinyLlama): tokens with
//     scores, where merging a pair is allowed when the pair spells a token and the pair whose
//     token scores highest merges first. As merges: every split of a token into two tokens,
//     ranked by the token's score (highest first; ties by the parts' ids), as transformers'
//     SentencePiece converters derive them; "▁" for spaces (and before the text unless
//     tokenizer.ggml.add_space_prefix is false), <0xXX> byte tokens for the rest.
// Token types (tokenizer.ggml.token_type): 1 normal, 2 unknown, 3 control, 4 user-defined,
// 5 unused, 6 byte. Control and unknown tokens are special added tokens, user-defined ones
// added tokens that are not special. BOS (and EOS) are put around encode(…, true)'s ids when
// tokenizer.ggml.add_bos_token (add_eos_token) says so; without the key, BOS is added for
// SentencePiece and Llama 3 vocabularies, as llama.cpp does.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "tensorgrad/errors.h"
#include "text/pretokenize.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace tg::text {
namespace {

using nlohmann::json;

constexpr const char* kMeta = "\xe2\x96\x81";  // "▁"

enum TokenType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

[[noreturn]] void gguf_tokenizer_fail(const std::string& path, const std::string& what) {
  throw TokenizerError("[Tokenizer::load] " + path + ": " + what);
}

const json& array_of(const io::GgufFile& g, const char* key, size_t n, bool strings) {
  const auto it = g.meta.find(key);
  if (it == g.meta.end() || !it->is_array())
    gguf_tokenizer_fail(g.path, "the metadata has no array " + std::string(key));
  if (n != 0 && it->size() != n)
    gguf_tokenizer_fail(g.path, std::string(key) + " has " + std::to_string(it->size()) +
                                    " entries, tokenizer.ggml.tokens " + std::to_string(n));
  for (const json& v : *it)
    if (strings ? !v.is_string() : !v.is_number())
      gguf_tokenizer_fail(g.path, std::string(key) + " holds " +
                                      v.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 40));
  return *it;
}

std::optional<int64_t> id_of(const io::GgufFile& g, const std::string& key, size_t vocab) {
  const auto it = g.meta.find(key);
  if (it == g.meta.end()) return std::nullopt;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<uint64_t>() >= vocab)
    gguf_tokenizer_fail(g.path, key + " is " + it->dump(-1, ' ', false, json::error_handler_t::replace) +
                                    ", not an id of the " + std::to_string(vocab) + " tokens");
  return it->get<int64_t>();
}

bool flag(const io::GgufFile& g, const std::string& key, bool fallback) {
  const auto it = g.meta.find(key);
  if (it == g.meta.end()) return fallback;
  if (!it->is_boolean()) gguf_tokenizer_fail(g.path, key + " is " + it->dump() + ", expected true or false");
  return it->get<bool>();
}

// TemplateProcessing that puts `bos` before and `eos` after the sequence (either may be absent).
json template_of(const std::vector<std::string>& tokens, std::optional<int64_t> bos,
                 std::optional<int64_t> eos) {
  json single = json::array(), pair = json::array(), specials = json::object();
  const auto special = [&](int64_t id, int type) {
    const std::string& t = tokens[static_cast<size_t>(id)];
    specials[t] = {{"id", t}, {"ids", {id}}, {"tokens", {t}}};
    return json{{"SpecialToken", {{"id", t}, {"type_id", type}}}};
  };
  for (int s = 0; s < 2; ++s) {
    json& form = s == 0 ? single : pair;
    for (int seq = 0; seq <= s; ++seq) {
      if (bos) form.push_back(special(*bos, seq));
      form.push_back({{"Sequence", {{"id", seq == 0 ? "A" : "B"}, {"type_id", seq}}}});
      if (eos) form.push_back(special(*eos, seq));
    }
  }
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", specials}};
}

// SentencePiece BPE's merges: every split of a token (at a character boundary) into two
// tokens, ranked by the token's score, highest first, then by the parts' ids.
json merges_from_scores(const std::vector<std::string>& tokens, const std::vector<int>& types,
                        const json& scores, const std::unordered_map<std::string, int64_t>& ids) {
  std::vector<std::tuple<double, int64_t, int64_t>> found;  // (−score, left id, right id)
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (types[id] != kNormal && types[id] != kUserDefined) continue;
    const std::string& t = tokens[id];
    const std::vector<Unit> units = decode_utf8(t);
    for (size_t u = 1; u < units.size(); ++u) {
      const size_t cut = units[u].offset;
      const auto l = ids.find(t.substr(0, cut)), r = ids.find(t.substr(cut));
      if (l != ids.end() && r != ids.end())
        found.emplace_back(-scores[id].get<double>(), l->second, r->second);
    }
  }
  std::sort(found.begin(), found.end());
  json merges = json::array();
  for (const auto& [score, l, r] : found)
    merges.push_back({tokens[static_cast<size_t>(l)], tokens[static_cast<size_t>(r)]});
  return merges;
}

}  // namespace

json tokenizer_json_of_gguf(const io::GgufFile& g) {
  const auto model_it = g.meta.find("tokenizer.ggml.model");
  if (model_it == g.meta.end() || !model_it->is_string())
    gguf_tokenizer_fail(g.path, "the GGUF file holds no tokenizer (tokenizer.ggml.model)");
  const std::string model = model_it->get<std::string>();
  if (model != "gpt2" && model != "llama")
    gguf_tokenizer_fail(g.path, "tokenizer.ggml.model \"" + model +
                                    "\" (read: gpt2, the byte-level BPE, and llama, SentencePiece's)");
  const json& token_list = array_of(g, "tokenizer.ggml.tokens", 0, true);
  const size_t n = token_list.size();
  std::vector<std::string> tokens(n);
  std::vector<int> types(n, kNormal);
  for (size_t i = 0; i < n; ++i) tokens[i] = token_list[i].get<std::string>();
  if (g.meta.contains("tokenizer.ggml.token_type")) {
    const json& t = array_of(g, "tokenizer.ggml.token_type", n, false);
    for (size_t i = 0; i < n; ++i) {
      if (!t[i].is_number_integer() || t[i].get<int64_t>() < kNormal || t[i].get<int64_t>() > kByte)
        gguf_tokenizer_fail(g.path, "tokenizer.ggml.token_type holds " + t[i].dump() + " (types 1 to 6)");
      types[i] = t[i].get<int>();
    }
  }
  const bool spm = model == "llama";
  const auto pre_it = g.meta.find("tokenizer.ggml.pre");
  if (pre_it != g.meta.end() && !pre_it->is_string())
    gguf_tokenizer_fail(g.path, "tokenizer.ggml.pre is not a string");
  std::string pre = pre_it != g.meta.end() ? pre_it->get<std::string>() : "default";
  // llama.cpp's other names of the same pre-tokenizers.
  if (pre == "llama3" || pre == "llama-v3") pre = "llama-bpe";
  if (pre == "deepseek-r1-qwen") pre = "qwen2";
  if (!spm && pre != "gpt-2" && pre != "llama-bpe" && pre != "qwen2")
    gguf_tokenizer_fail(
        g.path,
        "tokenizer.ggml.pre \"" + pre + "\" (read: gpt-2, llama-bpe, llama3, qwen2, deepseek-r1-qwen" +
            (pre == "default" ? "; a file without the key has llama.cpp's default split, not GPT-2's" : "") +
            ")");

  json vocab = json::object(), added = json::array();
  std::unordered_map<std::string, int64_t> ids;
  for (size_t i = 0; i < n; ++i) {
    if (ids.emplace(tokens[i], static_cast<int64_t>(i)).second) vocab[tokens[i]] = i;
    if (types[i] == kControl || types[i] == kUnknown || types[i] == kUserDefined)
      added.push_back({{"id", i},
                       {"content", tokens[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", types[i] != kUserDefined}});
  }
  const auto bos = id_of(g, "tokenizer.ggml.bos_token_id", n),
             eos = id_of(g, "tokenizer.ggml.eos_token_id", n);
  const auto unk = id_of(g, "tokenizer.ggml.unknown_token_id", n);
  const bool add_bos = flag(g, "tokenizer.ggml.add_bos_token", spm || pre == "llama-bpe");
  const bool add_eos = flag(g, "tokenizer.ggml.add_eos_token", false);
  json root = json::object();
  root["version"] = "1.0";
  root["added_tokens"] = added;
  root["post_processor"] =
      add_bos || add_eos ? template_of(tokens, add_bos ? bos : std::nullopt, add_eos ? eos : std::nullopt)
                         : json();
  json m = {{"type", "BPE"},
            {"dropout", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"vocab", vocab}};
  if (spm) {
    const json& scores = array_of(g, "tokenizer.ggml.scores", n, false);
    for (const json& v : scores)
      if (!std::isfinite(v.get<double>()))
        gguf_tokenizer_fail(g.path, "tokenizer.ggml.scores holds a score that is not finite");
    json normalizers = json::array();
    if (flag(g, "tokenizer.ggml.add_space_prefix", true))
      normalizers.push_back({{"type", "Prepend"}, {"prepend", kMeta}});
    normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}});
    root["normalizer"] = {{"type", "Sequence"}, {"normalizers", normalizers}};
    root["pre_tokenizer"] = nullptr;
    root["decoder"] = {{"type", "Sequence"},
                       {"decoders",
                        {{{"type", "Replace"}, {"pattern", {{"String", kMeta}}}, {"content", " "}},
                         {{"type", "ByteFallback"}},
                         {{"type", "Fuse"}},
                         {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
    m["merges"] = merges_from_scores(tokens, types, scores, ids);
    m["unk_token"] = unk ? json(tokens[static_cast<size_t>(*unk)]) : json();
    m["fuse_unk"] = true;
    m["byte_fallback"] = true;
    m["ignore_merges"] = false;
  } else {
    json merges = array_of(g, "tokenizer.ggml.merges", 0, true);
    const json byte_level = {{"type", "ByteLevel"},
                             {"add_prefix_space", false},
                             {"trim_offsets", true},
                             {"use_regex", pre == "gpt-2"}};
    if (pre == "llama-bpe" || pre == "qwen2") {
      const json split = {{"type", "Split"},
                          {"pattern",
                           {{"Regex", std::string(pattern_source(pre == "qwen2" ? SplitPattern::kQwen2
                                                                                : SplitPattern::kLlama3))}}},
                          {"behavior", "Isolated"},
                          {"invert", false}};
      root["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}};
    } else {
      root["pre_tokenizer"] = byte_level;
    }
    root["normalizer"] = pre == "qwen2" ? json{{"type", "NFC"}} : json();
    root["decoder"] = {
        {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
    m["merges"] = std::move(merges);
    m["unk_token"] = nullptr;
    m["fuse_unk"] = false;
    m["byte_fallback"] = false;
    m["ignore_merges"] = pre == "llama-bpe";
  }
  root["model"] = std::move(m);
  return root;
}

namespace {

// tokenizer.json's id of each token (the model's vocabulary and the added tokens), and which of
// those are special.
void ids_of(const json& root, std::map<int64_t, std::string>& tokens, std::map<int64_t, bool>& special) {
  for (const auto& [token, id] : root["model"]["vocab"].items()) tokens[id.get<int64_t>()] = token;
  if (root.contains("added_tokens"))
    for (const json& a : root["added_tokens"]) {
      tokens[a["id"].get<int64_t>()] = a["content"].get<std::string>();
      special[a["id"].get<int64_t>()] = a.value("special", false);
    }
}

// The pre-tokenizer's name in GGUF, from tokenizer.json's (byte-level BPE).
std::string pre_name_of(const json& pre) {
  if (pre.is_object() && pre.value("type", "") == "ByteLevel" && pre.value("use_regex", true)) return "gpt-2";
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre["pretokenizers"].size() == 2) {
    const json& split = pre["pretokenizers"][0];
    const std::string regex = split.contains("pattern") && split["pattern"].contains("Regex")
                                  ? split["pattern"]["Regex"].get<std::string>()
                                  : "";
    if (regex == pattern_source(SplitPattern::kLlama3)) return "llama-bpe";
    if (regex == pattern_source(SplitPattern::kQwen2)) return "qwen2";
  }
  return "";
}

// Whether a SentencePiece-style tokenizer.json puts "▁" before the text: a Prepend("▁")
// normalizer (alone or in a Sequence), or a Metaspace pre-tokenizer whose prepend_scheme is not
// "never" (older files: add_prefix_space).
bool space_prefix(const json& root) {
  const auto steps = [](const json& j, const char* list) {
    std::vector<json> out;
    if (!j.is_object()) return out;
    if (j.value("type", "") == "Sequence")
      for (const json& s : j.value(list, json::array())) out.push_back(s);
    else
      out.push_back(j);
    return out;
  };
  for (const json& n : steps(root.value("normalizer", json()), "normalizers"))
    if (n.value("type", "") == "Prepend" && n.value("prepend", "") == kMeta) return true;
  for (const json& p : steps(root.value("pre_tokenizer", json()), "pretokenizers"))
    if (p.value("type", "") == "Metaspace")
      return p.contains("prepend_scheme") ? p["prepend_scheme"] != "never"
                                          : p.value("add_prefix_space", true);
  return false;
}

}  // namespace

std::vector<io::GgufKv> gguf_tokenizer_kvs(const json& root, const std::string& file, int64_t vocab) {
  const auto refuse = [&](const std::string& what) {
    gguf_tokenizer_fail(file, "cannot be written to GGUF: " + what);
  };
  if (!root.contains("model") || root["model"].value("type", "") != "BPE")
    refuse("only BPE tokenizers (byte-level, or SentencePiece-style with byte_fallback) are");
  const json& model = root["model"];
  std::map<int64_t, std::string> by_id;
  std::map<int64_t, bool> special;
  ids_of(root, by_id, special);
  if (by_id.empty()) refuse("no tokens");
  if (vocab > 0 && by_id.rbegin()->first >= vocab)
    refuse("it has the id " + std::to_string(by_id.rbegin()->first) + ", beyond the model's vocabulary of " +
           std::to_string(vocab));
  // Padded to the model's vocabulary (the embedding's rows) with unused [PADi] tokens, as the
  // converter pads it: llama.cpp sizes the embedding by the token count.
  const auto n = static_cast<size_t>(std::max(by_id.rbegin()->first + 1, vocab));
  json tokens = json::array(), types = json::array();
  std::unordered_map<std::string, int64_t> id_of_token;
  for (size_t i = 0; i < n; ++i) {
    const auto it = by_id.find(static_cast<int64_t>(i));
    tokens.push_back(it == by_id.end() ? "[PAD" + std::to_string(i) + "]" : it->second);
    types.push_back(it == by_id.end()           ? kUnused
                    : !special.count(it->first) ? kNormal
                    : special[it->first]        ? kControl
                                                : kUserDefined);
    if (it != by_id.end()) id_of_token.emplace(it->second, it->first);
  }
  std::vector<std::string> merges;
  for (const json& m : model["merges"])
    merges.push_back(m.is_string() ? m.get<std::string>()
                                   : m[0].get<std::string>() + " " + m[1].get<std::string>());
  std::vector<io::GgufKv> kvs;
  const bool spm = model.value("byte_fallback", false);
  // encode(…, true)'s BOS: the leading special token of the post-processor's template (itself,
  // or a step of a Sequence, as Llama 3's ByteLevel + TemplateProcessing).
  std::optional<int64_t> bos;
  const json* post = root.contains("post_processor") ? &root["post_processor"] : nullptr;
  if (post != nullptr && post->is_object() && post->value("type", "") == "Sequence")
    for (const json& step : post->value("processors", json::array()))
      if (step.value("type", "") == "TemplateProcessing") post = &step;
  if (post != nullptr && post->is_object() && post->value("type", "") == "TemplateProcessing" &&
      !(*post)["single"].empty()) {
    const json& first = (*post)["single"][0];
    if (first.contains("SpecialToken")) {
      const auto it = id_of_token.find(first["SpecialToken"]["id"].get<std::string>());
      if (it != id_of_token.end()) bos = it->second;
    }
  }
  if (spm) {
    // Scores that rank merges as the file does: a token made by the merge of rank r scores −r.
    std::unordered_map<std::string, size_t> made;
    for (size_t r = 0; r < merges.size(); ++r) {
      std::string joined = merges[r];
      joined.erase(joined.find(' '), 1);
      made.emplace(joined, r);
    }
    json scores = json::array();
    for (size_t i = 0; i < n; ++i) {
      const std::string& t = tokens[i].get_ref<const std::string&>();
      const auto it = made.find(t);
      scores.push_back(types[i] == kUnused ? -1000.0
                       : it == made.end()  ? -1e9
                                           : -static_cast<double>(it->second));
      if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>' && types[i] == kNormal) types[i] = kByte;
    }
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      const auto it = id_of_token.find(model["unk_token"].get<std::string>());
      if (it != id_of_token.end()) {
        types[static_cast<size_t>(it->second)] = kUnknown;
        kvs.push_back({"tokenizer.ggml.unknown_token_id", io::kGgufU32, it->second});
      }
    }
    const bool prepend = space_prefix(root);
    kvs.insert(kvs.begin(), {{"tokenizer.ggml.model", io::kGgufString, "llama"},
                             {"tokenizer.ggml.add_space_prefix", io::kGgufBool, prepend}});
    kvs.push_back({"tokenizer.ggml.scores", io::kGgufArray, scores, io::kGgufF32});
  } else {
    const std::string pre = pre_name_of(root.contains("pre_tokenizer") ? root["pre_tokenizer"] : json());
    if (pre.empty()) refuse("a byte-level pre-tokenizer other than GPT-2's, Llama 3's or Qwen2's");
    kvs.push_back({"tokenizer.ggml.model", io::kGgufString, "gpt2"});
    kvs.push_back({"tokenizer.ggml.pre", io::kGgufString, pre});
    kvs.push_back({"tokenizer.ggml.merges", io::kGgufArray, merges, io::kGgufString});
  }
  kvs.push_back({"tokenizer.ggml.tokens", io::kGgufArray, tokens, io::kGgufString});
  kvs.push_back({"tokenizer.ggml.token_type", io::kGgufArray, types, io::kGgufI32});
  if (bos) kvs.push_back({"tokenizer.ggml.bos_token_id", io::kGgufU32, *bos});
  kvs.push_back({"tokenizer.ggml.add_bos_token", io::kGgufBool, bos.has_value()});
  return kvs;
}

}  // namespace tg::text
