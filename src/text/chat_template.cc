// ChatTemplate: finding a model folder's chat template and special tokens, and rendering it with
// the variables transformers' apply_chat_template passes (see include/tensorgrad/chat.h).
#include "tensorgrad/chat.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "tensorgrad/errors.h"
#include "text/jinja.h"

namespace tg {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

[[noreturn]] void fail_load(const std::string& file, const std::string& what) {
  throw TemplateError("[ChatTemplate::load] " + file + ": " + what);
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail_load(file.string(), "cannot open");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

json read_json(const fs::path& file) {
  try {
    return json::parse(read_text(file));
  } catch (const json::exception& e) {
    fail_load(file.string(), std::string("not valid JSON: ") + e.what());
  }
}

// A special token as tokenizer_config.json and special_tokens_map.json write it: a string, or an
// AddedToken object whose "content" is the text.
std::optional<std::string> token_field(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const json& t = config[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string())
    return t["content"].get<std::string>();
  return std::nullopt;
}

// A special token as transformers' tokenizers load it: from special_tokens_map.json where that
// has the key, else from tokenizer_config.json. (transformers reads special_tokens_map.json
// only for configs without "added_tokens_decoder"; the caller passes an empty map otherwise.)
std::optional<std::string> special_token(const json& config, const json& map, const char* key) {
  return map.is_object() && map.contains(key) ? token_field(map, key) : token_field(config, key);
}

// The template of a "chat_template" field: a string, or a list of {"name", "template"} where the
// one named "default" is taken.
std::string template_field(const json& field, const std::string& file) {
  if (field.is_string()) return field.get<std::string>();
  if (!field.is_array())
    fail_load(file, "\"chat_template\" is neither a string nor a list of named templates");
  std::string names;
  for (const json& t : field) {
    if (!t.is_object() || !t.contains("name") || !t.contains("template") || !t["name"].is_string() ||
        !t["template"].is_string())
      fail_load(file, "a \"chat_template\" list entry is not {\"name\": ..., \"template\": ...}");
    if (t["name"] == "default") return t["template"].get<std::string>();
    names += (names.empty() ? "" : ", ") + t["name"].get<std::string>();
  }
  fail_load(file, "\"chat_template\" has no template named \"default\" (it has: " + names + ")");
}

// The value of a JSON document; deeper than templates' values may nest is an error (also one
// that keeps this recursion within the stack).
jinja::Value from_json(const ordered_json& j, int depth = 0) {
  if (depth >= jinja::kMaxValueDepth && j.is_structured())
    throw TemplateError("[ChatTemplate::render_json] the variables nest more than " +
                        std::to_string(jinja::kMaxValueDepth) + " levels deep");
  switch (j.type()) {
    case ordered_json::value_t::null: return jinja::Value::none();
    case ordered_json::value_t::boolean: return jinja::Value(j.get<bool>());
    case ordered_json::value_t::number_integer: return jinja::Value(j.get<int64_t>());
    case ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return jinja::Value(static_cast<int64_t>(u));
      return jinja::Value(static_cast<double>(u));
    }
    case ordered_json::value_t::number_float: return jinja::Value(j.get<double>());
    case ordered_json::value_t::string: return jinja::Value(j.get<std::string>());
    case ordered_json::value_t::array: {
      jinja::ValueList items;
      for (const ordered_json& x : j) items.push_back(from_json(x, depth + 1));
      return jinja::Value::list(std::move(items));
    }
    case ordered_json::value_t::object: {
      jinja::Dict d;
      for (auto it = j.begin(); it != j.end(); ++it)
        d.items.emplace_back(jinja::Value(it.key()), from_json(it.value(), depth + 1));
      return jinja::Value::dict(std::move(d));
    }
    default: throw TemplateError("[ChatTemplate::render_json] a JSON value of an unsupported type");
  }
}

// The special tokens transformers passes to templates (its special_tokens_map), where set.
void add_tokens(jinja::Dict& vars, const SpecialTokens& t) {
  const std::pair<const char*, const std::optional<std::string>*> tokens[] = {
      {"bos_token", &t.bos_token},  {"eos_token", &t.eos_token}, {"unk_token", &t.unk_token},
      {"pad_token", &t.pad_token},  {"sep_token", &t.sep_token}, {"cls_token", &t.cls_token},
      {"mask_token", &t.mask_token}};
  for (const auto& [name, value] : tokens)
    if (*value && !vars.find(jinja::Value(name)))
      vars.items.emplace_back(jinja::Value(name), jinja::Value(**value));
}

// Renders `t` with `vars` and the special tokens the caller did not set; errors name `api`.
std::string render_with(const jinja::Template& t, jinja::Dict vars, const SpecialTokens& tokens,
                        const std::function<std::tm()>& clock, const char* api) {
  add_tokens(vars, tokens);
  try {
    return t.render(vars, jinja::Environment{clock});
  } catch (const TemplateError& e) {
    throw TemplateError(std::string("[ChatTemplate::") + api + "] " + e.what());
  }
}

}  // namespace

ChatTemplate ChatTemplate::parse(std::string_view source, SpecialTokens tokens) {
  ChatTemplate t;
  try {
    t.template_ = jinja::Template::parse(source);
  } catch (const TemplateError& e) {
    throw TemplateError(std::string("[ChatTemplate::parse] ") + e.what());
  }
  t.source_ = std::string(source);
  t.tokens_ = std::move(tokens);
  return t;
}

namespace {

// A GGUF file's template (tokenizer.chat_template) and special tokens (the tokens whose ids
// tokenizer.ggml.<bos|eos|unknown|padding|seperator|cls|mask>_token_id name).
ChatTemplate load_gguf(const std::string& path) {
  io::GgufFile g;
  try {
    g = io::read_gguf(path);
  } catch (const CheckpointError& e) {
    throw TemplateError(std::string("[ChatTemplate::load] ") + e.what());
  }
  const auto it = g.meta.find("tokenizer.chat_template");
  if (it == g.meta.end() || !it->is_string())
    fail_load(path, "no chat template: the GGUF file has no tokenizer.chat_template (a base model?)");
  const json* tokens = g.meta.contains("tokenizer.ggml.tokens") ? &g.meta["tokenizer.ggml.tokens"] : nullptr;
  const auto token = [&](const char* key) -> std::optional<std::string> {
    const auto id = g.meta.find(std::string("tokenizer.ggml.") + key + "_token_id");
    if (tokens == nullptr || id == g.meta.end() || !id->is_number_unsigned() ||
        id->get<size_t>() >= tokens->size())
      return std::nullopt;
    const json& t = (*tokens)[id->get<size_t>()];
    return t.is_string() ? std::optional(t.get<std::string>()) : std::nullopt;
  };
  try {
    return ChatTemplate::parse(it->get<std::string>(), {.bos_token = token("bos"),
                                                        .eos_token = token("eos"),
                                                        .unk_token = token("unknown"),
                                                        .pad_token = token("padding"),
                                                        .sep_token = token("seperator"),
                                                        .cls_token = token("cls"),
                                                        .mask_token = token("mask")});
  } catch (const TemplateError& e) {
    fail_load(path, e.what());
  }
}

}  // namespace

ChatTemplate ChatTemplate::load(const std::string& folder) {
  std::error_code ec;
  if (io::is_gguf(folder)) return load_gguf(folder);
  if (!fs::is_directory(folder, ec)) fail_load(folder, "neither a folder nor a GGUF file");
  const fs::path dir(folder);
  const fs::path config_file = dir / "tokenizer_config.json";
  const bool has_config = fs::is_regular_file(config_file, ec);
  const json config = has_config ? read_json(config_file) : json::object();

  std::string source, from;
  if (fs::is_regular_file(dir / "chat_template.jinja", ec)) {
    from = (dir / "chat_template.jinja").string();
    source = read_text(from);
  } else if (config.is_object() && config.contains("chat_template") && !config["chat_template"].is_null()) {
    from = config_file.string();
    source = template_field(config["chat_template"], from);
  } else if (fs::is_regular_file(dir / "chat_template.json", ec)) {  // a processor's
    from = (dir / "chat_template.json").string();
    const json j = read_json(from);
    if (!j.is_object() || !j.contains("chat_template")) fail_load(from, "no \"chat_template\" in it");
    source = template_field(j["chat_template"], from);
  } else {
    fail_load(folder, std::string("no chat template: the folder has no chat_template.jinja and ") +
                          (has_config ? "its tokenizer_config.json has no \"chat_template\""
                                      : "no tokenizer_config.json") +
                          " (a base model without a chat template, or files saved without one)");
  }

  const fs::path map_file = dir / "special_tokens_map.json";
  const bool legacy = !(config.is_object() && config.contains("added_tokens_decoder"));
  const json map = legacy && fs::is_regular_file(map_file, ec) ? read_json(map_file) : json::object();
  SpecialTokens tokens{
      .bos_token = special_token(config, map, "bos_token"),
      .eos_token = special_token(config, map, "eos_token"),
      .unk_token = special_token(config, map, "unk_token"),
      .pad_token = special_token(config, map, "pad_token"),
      .sep_token = special_token(config, map, "sep_token"),
      .cls_token = special_token(config, map, "cls_token"),
      .mask_token = special_token(config, map, "mask_token"),
  };
  ChatTemplate t;
  try {
    t.template_ = jinja::Template::parse(source);
  } catch (const TemplateError& e) {
    fail_load(from, e.what());
  }
  t.source_ = std::move(source);
  t.tokens_ = std::move(tokens);
  return t;
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  jinja::ValueList list;
  for (const ChatMessage& m : messages) {
    jinja::Dict d;
    d.items.emplace_back(jinja::Value("role"), jinja::Value(m.role));
    d.items.emplace_back(jinja::Value("content"), jinja::Value(m.content));
    list.push_back(jinja::Value::dict(std::move(d)));
  }
  jinja::Dict vars;
  vars.items.emplace_back(jinja::Value("messages"), jinja::Value::list(std::move(list)));
  vars.items.emplace_back(jinja::Value("tools"), jinja::Value::none());
  vars.items.emplace_back(jinja::Value("documents"), jinja::Value::none());
  vars.items.emplace_back(jinja::Value("add_generation_prompt"), jinja::Value(add_generation_prompt));
  return render_with(*template_, std::move(vars), tokens_, clock_, "render");
}

std::string ChatTemplate::render_json(std::string_view variables) const {
  ordered_json j;
  try {
    j = ordered_json::parse(variables);
  } catch (const ordered_json::exception& e) {
    throw TemplateError(std::string("[ChatTemplate::render_json] the variables are not valid JSON: ") +
                        e.what());
  }
  if (!j.is_object()) throw TemplateError("[ChatTemplate::render_json] the variables must be a JSON object");
  jinja::Dict vars = from_json(j).dict_data();
  for (const char* name : {"tools", "documents"})
    if (!vars.find(jinja::Value(name))) vars.items.emplace_back(jinja::Value(name), jinja::Value::none());
  if (!vars.find(jinja::Value("add_generation_prompt")))
    vars.items.emplace_back(jinja::Value("add_generation_prompt"), jinja::Value(false));
  return render_with(*template_, std::move(vars), tokens_, clock_, "render_json");
}

}  // namespace tg
