// Whisper → nn::Whisper, names as in the file (WhisperForConditionalGeneration: model.encoder.*,
// model.decoder.*, the head tied to model.decoder.embed_tokens; a proj_out the file holds must
// equal it). Refused: another activation, an untied head. Not applied (training-time options
// transformers has): encoder_layerdrop, decoder_layerdrop, apply_spec_augment.
// WhisperTokens::load reads the folder's generation settings.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "io/pretrained_internal.h"
#include "tensorgrad/tokenizer.h"
#include "tensorgrad/whisper.h"

namespace tg::pretrained::detail {

void load_whisper(Model& m, const json& c) {
  const std::string& f = m.folder;
  nn::WhisperConfig w;
  w.vocab = required(c, f, "vocab_size");
  w.mels = field<int64_t>(c, f, "num_mel_bins", w.mels);
  w.d_model = field<int64_t>(c, f, "d_model", w.d_model);
  w.encoder_layers = field<int64_t>(c, f, "encoder_layers", w.encoder_layers);
  w.encoder_heads = field<int64_t>(c, f, "encoder_attention_heads", w.encoder_heads);
  w.encoder_ffn = field<int64_t>(c, f, "encoder_ffn_dim", w.encoder_ffn);
  w.decoder_layers = field<int64_t>(c, f, "decoder_layers", w.decoder_layers);
  w.decoder_heads = field<int64_t>(c, f, "decoder_attention_heads", w.decoder_heads);
  w.decoder_ffn = field<int64_t>(c, f, "decoder_ffn_dim", w.decoder_ffn);
  w.source_positions = field<int64_t>(c, f, "max_source_positions", w.source_positions);
  w.target_positions = field<int64_t>(c, f, "max_target_positions", w.target_positions);
  w.scale_embedding = field<bool>(c, f, "scale_embedding", false);
  w.dropout = field<double>(c, f, "dropout", 0.0);
  w.attention_dropout = field<double>(c, f, "attention_dropout", 0.0);
  w.activation_dropout = field<double>(c, f, "activation_dropout", 0.0);
  w.start_id = field<int32_t>(c, f, "decoder_start_token_id", w.start_id);
  w.pad_id = field<int32_t>(c, f, "pad_token_id", w.pad_id);
  const std::vector<int32_t> eos = eos_of(c);
  if (!eos.empty()) w.eos_id = eos.front();
  const std::string act = field<std::string>(c, f, "activation_function", "gelu");
  if (act != "gelu")
    fail(f, "config.json: activation_function \"" + act + "\" is not implemented by nn::Whisper (gelu is)");
  if (!field<bool>(c, f, "tie_word_embeddings", true))
    fail(f,
         "config.json: tie_word_embeddings false (a proj_out of its own) is not implemented by nn::Whisper");
  m.context = w.target_positions;
  m.eos_ids = {w.eos_id};
  m.config = w;
  m.module = std::make_unique<nn::Whisper>(w);

  Weights file = read_weights(f);
  if (!tied_copy_ok(file.tensors, "proj_out.weight", "model.decoder.embed_tokens.weight"))
    fail(f,
         "proj_out.weight differs from model.decoder.embed_tokens.weight (nn::Whisper's head is tied to it)");
  map_weights(
      m, std::move(file), [](const std::string& p) { return Source{p}; },
      [](const std::string& n) { return n == "proj_out.weight"; });
}

std::string config_json_of(const nn::WhisperConfig& w) {
  const json j{{"architectures", {"WhisperForConditionalGeneration"}},
               {"model_type", "whisper"},
               {"vocab_size", w.vocab},
               {"num_mel_bins", w.mels},
               {"d_model", w.d_model},
               {"encoder_layers", w.encoder_layers},
               {"encoder_attention_heads", w.encoder_heads},
               {"encoder_ffn_dim", w.encoder_ffn},
               {"decoder_layers", w.decoder_layers},
               {"decoder_attention_heads", w.decoder_heads},
               {"decoder_ffn_dim", w.decoder_ffn},
               {"max_source_positions", w.source_positions},
               {"max_target_positions", w.target_positions},
               {"scale_embedding", w.scale_embedding},
               {"dropout", w.dropout},
               {"attention_dropout", w.attention_dropout},
               {"activation_dropout", w.activation_dropout},
               {"activation_function", "gelu"},
               {"decoder_start_token_id", w.start_id},
               {"eos_token_id", w.eos_id},
               {"pad_token_id", w.pad_id},
               {"tie_word_embeddings", true},
               {"is_encoder_decoder", true},
               {"torch_dtype", "float32"}};
  return j.dump(2);
}

}  // namespace tg::pretrained::detail

namespace tg {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

[[noreturn]] void tokens_fail(const std::string& file, const std::string& what) {
  throw CheckpointError("[WhisperTokens::load] " + file + ": " + what);
}

json read_object(const fs::path& path) {
  std::ifstream in(path);
  if (!in) tokens_fail(path.string(), "cannot be read");
  try {
    json j = json::parse(in);
    if (!j.is_object()) tokens_fail(path.string(), "not a JSON object");
    return j;
  } catch (const json::exception& e) {
    tokens_fail(path.string(), std::string("not JSON: ") + e.what());
  }
}

// The first of the files holding `key` (generation_config.json before config.json), or null.
const json* find(const std::vector<std::pair<std::string, json>>& files, const char* key, std::string* file) {
  for (const auto& [name, j] : files)
    if (j.contains(key) && !j[key].is_null()) {
      *file = name;
      return &j[key];
    }
  return nullptr;
}

}  // namespace

WhisperTokens WhisperTokens::load(const std::string& folder) {
  std::vector<std::pair<std::string, json>> files;
  for (const char* name : {"generation_config.json", "config.json"}) {
    const fs::path path = fs::path(folder) / name;
    if (fs::exists(path)) files.emplace_back(path.string(), read_object(path));
  }
  std::optional<Tokenizer> tok;
  if (fs::exists(fs::path(folder) / "tokenizer.json")) tok = Tokenizer::load(folder);
  WhisperTokens t;
  std::string file;
  // An id: the files' key, else the tokenizer's token, else an error.
  const auto id = [&](const char* key, const char* token, int32_t* out) {
    if (const json* v = find(files, key, &file)) {
      const json& e = v->is_array() && !v->empty() ? v->front() : *v;
      if (!e.is_number_integer())
        tokens_fail(file, std::string("\"") + key + "\" is " + v->dump() + ", expected a token id");
      *out = e.get<int32_t>();
    } else if (const auto found = tok && token ? tok->token_to_id(token) : std::nullopt) {
      *out = *found;
    } else {
      tokens_fail(folder, std::string("no \"") + key + "\" in generation_config.json or config.json" +
                              (token ? std::string(" and no ") + token + " in tokenizer.json" : ""));
    }
  };
  id("decoder_start_token_id", "<|startoftranscript|>", &t.start);
  id("eos_token_id", "<|endoftext|>", &t.eos);
  id("no_timestamps_token_id", "<|notimestamps|>", &t.no_timestamps);
  const auto ids = [&](const char* key, std::vector<int32_t>* out) {
    const json* v = find(files, key, &file);
    if (!v) return;
    if (!v->is_array() ||
        !std::all_of(v->begin(), v->end(), [](const json& e) { return e.is_number_integer(); }))
      tokens_fail(file, std::string("\"") + key + "\" is " + v->dump() + ", expected a list of token ids");
    *out = v->get<std::vector<int32_t>>();
  };
  ids("suppress_tokens", &t.suppress);
  ids("begin_suppress_tokens", &t.begin_suppress);
  if (const json* v = find(files, "lang_to_id", &file)) {
    if (!v->is_object()) tokens_fail(file, "\"lang_to_id\" is not an object of \"<|code|>\": id");
    for (const auto& [token, value] : v->items()) {
      if (!value.is_number_integer() || token.size() < 5 || !token.starts_with("<|") ||
          !token.ends_with("|>"))
        tokens_fail(file,
                    "\"lang_to_id\" has \"" + token + "\": " + value.dump() + ", expected \"<|code|>\": id");
      t.languages[token.substr(2, token.size() - 4)] = value.get<int32_t>();
    }
  }
  if (const json* v = find(files, "task_to_id", &file)) {
    if (!v->is_object()) tokens_fail(file, "\"task_to_id\" is not an object of task: id");
    for (const auto& [task, value] : v->items()) {
      if (!value.is_number_integer())
        tokens_fail(file, "\"task_to_id\" has \"" + task + "\": " + value.dump());
      if (task == "transcribe") t.transcribe = value.get<int32_t>();
      if (task == "translate") t.translate = value.get<int32_t>();
    }
  }
  if (const json* v = find(files, "is_multilingual", &file); v && *v == false) {
    t.languages.clear();  // an English-only model: its prompt has no language and no task
    t.transcribe = t.translate = -1;
  }
  // forced_decoder_ids (the older way to pin the prompt): [[1, <|lang|> or null], [2, <|task|>],
  // [3, <|notimestamps|>]] for multilingual models, [[1, <|notimestamps|>]] for English-only ones.
  // A language or task found there is the default of a transcription that names none.
  if (const json* v = find(files, "forced_decoder_ids", &file); v && v->is_array()) {
    for (const json& pair : *v) {
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() ||
          !pair[1].is_number_integer())
        continue;  // [1, null]: no language pinned
      const int32_t id = pair[1].get<int32_t>();
      bool known = id == t.no_timestamps || (t.multilingual() && (id == t.transcribe || id == t.translate));
      for (const auto& [code, lang] : t.languages)
        if (lang == id) {
          t.forced_language = code;
          known = true;
        }
      if (t.multilingual() && id == t.translate) t.forced_task = "translate";
      if (!known)
        tokens_fail(file, "forced_decoder_ids puts " + pair[1].dump() + " at position " + pair[0].dump() +
                              ", which is not a language, task or <|notimestamps|> token");
    }
  }
  if (t.multilingual() && (t.transcribe < 0 || t.translate < 0))
    tokens_fail(folder, "a multilingual model (lang_to_id) without task_to_id's transcribe and translate");
  return t;
}

}  // namespace tg
