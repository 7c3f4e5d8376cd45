// Chat templates: the prompt text a chat model expects for a list of messages, rendered from the
// Jinja2 `chat_template` of a Hugging Face model folder as `transformers`' tokenizer renders it
// with apply_chat_template(messages, tokenize=False, add_generation_prompt=...):
//
//   tg::ChatTemplate chat = tg::ChatTemplate::load("models/qwen2.5-0.5b-instruct");
//   std::vector<tg::ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hi!"}};
//   std::string prompt = chat.render(messages);  // "<|im_start|>system\nBe brief.<|im_end|>\n..."
//   std::vector<int32_t> ids = tokenizer.encode(prompt);
//
// The template is the folder's chat_template.jinja, else the "chat_template" of its
// tokenizer_config.json (a string, or a list of {"name", "template"} of which "default" is
// taken); the special tokens (bos_token, eos_token, unk_token, pad_token, sep_token, cls_token,
// mask_token) come from tokenizer_config.json and special_tokens_map.json, each a string or an
// object with "content": as transformers loads them, special_tokens_map.json is read only when
// tokenizer_config.json has no "added_tokens_decoder" (configs saved by older transformers), and
// then a token it sets replaces tokenizer_config.json's.
// Rendering sees what transformers passes: `messages` (a list of {"role", "content"} dicts),
// `add_generation_prompt`, `tools` and `documents` (none), and the special tokens present.
// render_json() takes the variables as a JSON object instead, for messages with more than a
// role and a string content (tool_calls, content as a list of parts) and for `tools`.
//
// The template language is jinja2's, run with the semantics of Python's jinja2 in transformers'
// environment (trim_blocks, lstrip_blocks, loop controls, the immutable sandbox, jinja2's lenient
// Undefined):
//   - text, {{ }}, {% %}, {# #}, whitespace control ({%- -%} {{- -}} {#- -#}, "+" to keep),
//     {% raw %};
//   - if / elif / else; for (loop.index, index0, revindex, revindex0, first, last, length,
//     previtem, nextitem, cycle(), changed(); unpacking `for k, v in d.items()`; `for x in xs
//     if cond`; {% else %}); break, continue; set (names, tuples, `ns.attr` of a namespace()),
//     {% set x %}...{% endset %} (with filters); macro (positional, keyword and default
//     arguments, varargs, kwargs, caller) and {% call %}; {% filter %}; {% with %};
//     transformers' {% generation %};
//   - literals (strings with Python's escapes, ints, floats, true/True/false/False/none/None,
//     lists, tuples, dicts), a.b, a['b'], a[1:-1:2], + - * / // % ** (Python's int and float
//     rules, str % args), ~, comparisons (chained), and / or / not, in / not in, `x if c else y`,
//     calls with keyword arguments;
//   - filters: abs attr capitalize center count d default dictsort e escape first float
//     forceescape format indent int items join last length list lower map max min reject
//     rejectattr replace reverse round safe select selectattr sort string sum title tojson (as
//     transformers': json.dumps with ensure_ascii off; indent, separators, sort_keys) trim
//     truncate unique upper wordcount;
//   - tests: defined undefined none boolean true false integer float number string mapping
//     iterable sequence callable sameas eq equalto ne lt le gt ge (and == != < <= > >=) in odd
//     even divisibleby lower upper escaped filter test;
//   - methods of strings (strip lstrip rstrip split rsplit splitlines startswith endswith upper
//     lower title capitalize swapcase replace find rfind index rindex count join removeprefix
//     removesuffix center ljust rjust zfill format and the is* predicates), of dicts (get items
//     keys values copy) and of lists (index count copy); methods that would change a list or
//     dict are refused, as the sandbox does;
//   - globals: range, namespace, dict, joiner, raise_exception(message), strftime_now(format).
// Values print as Python prints them (None, True, 1.0, 1e-05, ['a', 1], {'k': 'v'}).
// Not supported: {% include %}, {% extends %}, {% block %}, {% import %}, recursive loops,
// *args / **kwargs in calls, the filters groupby, batch, slice, striptags, wordwrap, urlencode,
// xmlattr, filesizeformat, pprint and random. Upper and lower case know ASCII, Latin-1, Latin
// Extended, Greek (with the final sigma), Cyrillic and Armenian letters, and "ß" → "SS"; other
// characters keep their case. range(), dict.items() and the like are lists (they print as
// lists, where Python prints range(0, 3) or dict_items([...])).
//
// Errors are TemplateError: a folder without a template (saying what it holds), a template that
// does not parse (line and column), and at render time raise_exception() (its message) or a
// run-time error (an undefined function called, wrong operand types, ...), naming the line.
// Hostile templates meet limits instead of exhausting the stack or memory: expressions and
// blocks nest at most a few hundred levels deep (chains such as a + b + ... or x|f|g count),
// as do values (lists, dicts) and evaluation (statements, expressions, macro calls, like
// Python's recursion limit), and what can multiply sizes (repetition, padding, %-formatting,
// concatenation, joins, the output) stops at 64 MiB.
#pragma once
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tg {

namespace jinja {
class Template;
}

struct ChatMessage {
  std::string role;
  std::string content;
};

/// The special tokens a template may read; an absent one is undefined in the template.
struct SpecialTokens {
  std::optional<std::string> bos_token, eos_token, unk_token, pad_token, sep_token, cls_token, mask_token;
};

class ChatTemplate {
 public:
  /// Reads a model folder's template and special tokens (see above), or a llama.cpp GGUF
  /// file's (tokenizer.chat_template, and the tokens its tokenizer.ggml.*_token_id keys name).
  /// Throws TemplateError when there is no template, or it does not parse.
  static ChatTemplate load(const std::string& folder);
  /// A template from its source text; `tokens` gives bos_token etc. Throws TemplateError
  /// (line and column) when it does not parse.
  static ChatTemplate parse(std::string_view source, SpecialTokens tokens = {});

  /// The prompt text for `messages`; with add_generation_prompt the template's opening of an
  /// assistant turn is appended. Throws TemplateError for a raise_exception() in the template or
  /// a run-time error, naming the template line.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt = true) const;
  /// Renders with the variables of a JSON object: "messages", "add_generation_prompt" (false if
  /// absent, as transformers' default), "tools", "documents" (none if absent) and anything else
  /// the template reads; the special tokens are added where the object does not set them.
  /// Throws TemplateError for text that is not a JSON object, and as render().
  std::string render_json(std::string_view variables) const;

  /// The clock strftime_now() reads; by default the local time.
  void set_clock(std::function<std::tm()> now) { clock_ = std::move(now); }
  /// The template's text.
  const std::string& source() const { return source_; }
  const SpecialTokens& special_tokens() const { return tokens_; }

 private:
  ChatTemplate() = default;
  std::string source_;
  SpecialTokens tokens_;
  std::shared_ptr<const jinja::Template> template_;
  std::function<std::tm()> clock_;
};

}  // namespace tg
