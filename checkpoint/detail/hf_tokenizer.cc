// tokenizer.json (Hugging Face `tokenizers`) -> TokenizerData. Byte-level BPE, whose pre-tokenizer
// must be one kvzip implements, recognised from its structure and regex:
//   ByteLevel(use_regex)                                   -> "gpt2"
//   Sequence[Digits(individual), ByteLevel(use_regex)]     -> "smollm"
//   Sequence[Split(Regex R, Isolated), ByteLevel(no regex)] -> R's name: "llama-bpe", "qwen2",
//                                                                        "gpt2"
// or SentencePiece-style BPE (byte_fallback, spaces as "▁": Gemma, Llama 2), in the three forms
// converters write (spm_layout below); it keeps its ranked merges (tokenizer/detail/spm.h).
// Token ids and types follow llama.cpp's converter, so the tokenizer hash of a byte-level folder
// equals that of its GGUF conversion: vocab texts as stored (byte-level alphabet), added tokens
// verbatim (special -> Control, others -> UserDefined), ids the model has but the tokenizer lacks
// -> "[PAD<id>]" Unused.
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/detail/hf_json.h"

namespace kvzip::model::detail {
namespace {

using nlohmann::json;

struct KnownRegex {
  const char* pre;
  const char* regex;  // as tokenizer.json spells it, after JSON unescaping
};
constexpr KnownRegex kRegexes[] = {
    {"llama-bpe",
     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    {"qwen2",
     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    {"gpt2", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"},
};

constexpr const char* kMetaspace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : "?";
}

// A short human-readable form of a pre-tokenizer for messages.
std::string describe(const json& p) {
  const std::string t = type_of(p);
  if (t == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array()) {
    std::string s = "Sequence[";
    for (size_t i = 0; i < p["pretokenizers"].size(); ++i)
      s += (i ? ", " : "") + describe(p["pretokenizers"][i]);
    return s + "]";
  }
  if (t == "Split" && p.contains("pattern")) {
    std::string pat = p["pattern"].dump();
    if (pat.size() > 70) pat = pat.substr(0, 67) + "...";
    return "Split(" + pat + ")";
  }
  return t;
}

// The kvzip pre-tokenizer name for tokenizer.json's "pre_tokenizer", or Errc::unsupported.
std::string recognise_pre(const JsonFile& f, const json* pre) {
  const std::string unsupported =
      " is not a pre-tokenizer kvzip implements (byte-level BPE with the GPT-2, SmolLM, Llama 3 or "
      "Qwen2 split)";
  if (!pre) f.fail(Errc::unsupported, "pre_tokenizer is null" + unsupported);
  std::vector<const json*> steps;
  if (type_of(*pre) == "Sequence" && pre->contains("pretokenizers") &&
      (*pre)["pretokenizers"].is_array())
    for (const json& s : (*pre)["pretokenizers"]) steps.push_back(&s);
  else steps.push_back(pre);
  auto fail = [&]() -> std::string {
    std::string hint;
    for (const json* s : steps)
      if (type_of(*s) == "Metaspace")
        hint = "; a Metaspace tokenizer is read only with BPE and model.byte_fallback = true";
    f.fail(Errc::unsupported, "pre_tokenizer " + describe(*pre) + unsupported + hint);
  };
  const json& last = *steps.back();
  if (type_of(last) != "ByteLevel") return fail();
  if (last.value("add_prefix_space", false)) return fail();
  const bool byte_regex = last.value("use_regex", true);
  if (steps.size() == 1) return byte_regex ? "gpt2" : fail();
  if (steps.size() != 2) return fail();
  const json& first = *steps.front();
  if (type_of(first) == "Digits" && first.value("individual_digits", false) && byte_regex)
    return "smollm";
  if (type_of(first) != "Split" || byte_regex) return fail();
  if (first.value("behavior", std::string()) != "Isolated" || first.value("invert", false))
    return fail();
  const json* pattern = first.contains("pattern") ? &first["pattern"] : nullptr;
  if (!pattern || !pattern->is_object() || !pattern->contains("Regex") ||
      !(*pattern)["Regex"].is_string())
    return fail();
  const std::string regex = (*pattern)["Regex"].get<std::string>();
  for (const KnownRegex& k : kRegexes)
    if (regex == k.regex) return k.pre;
  return fail();
}

bool is_replace_space(const json& n) {
  return type_of(n) == "Replace" && n.contains("pattern") && n["pattern"].is_object() &&
         n["pattern"].value("String", std::string()) == " " &&
         n.value("content", std::string()) == kMetaspace;
}

// SentencePiece-style BPE: byte_fallback, spaces replaced by "▁", in one of the forms converters
// write:
//   normalizer Replace(" " -> "▁"); pre_tokenizer null or Split(" ", MergedWithPrevious)   (Gemma)
//   normalizer Sequence[Prepend("▁"), Replace(" " -> "▁")]; pre_tokenizer null            (Llama 2)
//   normalizer null; pre_tokenizer Metaspace("▁", prepend_scheme, split)                   (newer)
// With the normalizer the whole fragment is one word (the Split never matches: no spaces remain).
void spm_layout(const JsonFile& f, const json& model, TokenizerData& d) {
  const std::string unsupported =
      "; kvzip reads a SentencePiece-style tokenizer.json whose normalizer replaces \" \" by "
      "\"\u2581\" "
      "(optionally after Prepend(\"\u2581\")) or whose pre-tokenizer is Metaspace";
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (f.opt_string(key, &model, std::string("model.") + key).value_or("") != "")
      f.fail(Errc::unsupported,
             std::string("model.") + key + " is set; SentencePiece-style BPE does not use it");
  if (f.opt_bool("ignore_merges", &model, "model.ignore_merges").value_or(false))
    f.fail(Errc::unsupported, "model.ignore_merges = true with byte_fallback is not supported");
  const json* norm = f.member("normalizer");
  const json* pre = f.member("pre_tokenizer");
  d.model = "llama";
  d.pre = "default";
  d.ranked_merges = true;
  d.add_space_prefix = false;
  if (norm) {
    std::vector<const json*> steps;
    if (type_of(*norm) == "Sequence" && norm->contains("normalizers") &&
        (*norm)["normalizers"].is_array())
      for (const json& n : (*norm)["normalizers"]) steps.push_back(&n);
    else steps.push_back(norm);
    const bool prepend = steps.size() == 2 && type_of(*steps[0]) == "Prepend" &&
                         steps[0]->value("prepend", std::string()) == kMetaspace;
    if (!((steps.size() == 1 || prepend) && is_replace_space(*steps.back())))
      f.fail(Errc::unsupported,
             "normalizer " + norm->dump().substr(0, 120) + " with byte_fallback BPE" + unsupported);
    d.add_space_prefix = prepend;  // a normalizer runs on every fragment between added tokens
    const bool split_noop = pre && type_of(*pre) == "Split" && (*pre).contains("pattern") &&
                            (*pre)["pattern"].is_object() &&
                            (*pre)["pattern"].value("String", std::string()) == " ";
    if (pre && !split_noop)
      f.fail(Errc::unsupported, "pre_tokenizer " + describe(*pre) +
                                    " after a normalizer that replaces spaces" + unsupported);
  } else {
    if (!pre || type_of(*pre) != "Metaspace" ||
        pre->value("replacement", std::string()) != kMetaspace)
      f.fail(Errc::unsupported, "pre_tokenizer " + (pre ? describe(*pre) : std::string("null")) +
                                    " without a normalizer" + unsupported);
    std::string scheme = pre->value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = pre->value("add_prefix_space", true) ? "always" : "never";
    if (scheme != "first" && scheme != "always" && scheme != "never")
      f.fail(Errc::unsupported,
             "Metaspace prepend_scheme '" + scheme + "' (expected first, always or never)");
    d.add_space_prefix = scheme != "never";
    d.space_prefix_first_only = scheme == "first";
    d.prefix_unless_space = true;
    d.split_words = pre->value("split", true);
  }
  if (const json* dec = f.member("decoder")) {
    bool ok = type_of(*dec) == "Metaspace";
    if (type_of(*dec) == "Sequence" && dec->contains("decoders") && (*dec)["decoders"].is_array()) {
      ok = true;
      for (const json& x : (*dec)["decoders"]) {
        const std::string t = type_of(x);
        ok &= t == "Replace" || t == "ByteFallback" || t == "Fuse" || t == "Strip";
      }
    }
    if (!ok)
      f.fail(Errc::unsupported,
             "decoder '" + type_of(*dec) +
                 "' is not supported with byte_fallback BPE; "
                 "kvzip decodes \"\u2581\" as a space and <0xXX> tokens as bytes");
  }
}

void check_model_and_normalizer(const JsonFile& f, const json& model, const std::string& pre) {
  const std::string type = type_of(model);
  if (type != "BPE")
    f.fail(Errc::unsupported,
           "model.type '" + type + "' is not supported; kvzip implements byte-level BPE only");
  if (model.value("byte_fallback", false))
    f.fail(Errc::unsupported,
           "model.byte_fallback = true: a SentencePiece-style BPE (Llama 2, Mistral 7B), "
           "which kvzip does not implement; it implements byte-level BPE");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (f.opt_string(key, &model, std::string("model.") + key).value_or("") != "")
      f.fail(Errc::unsupported,
             std::string("model.") + key + " is set; byte-level BPE does not use it");
  const bool ignore = f.opt_bool("ignore_merges", &model, "model.ignore_merges").value_or(false);
  if (ignore != pre_tokenizer_ignores_merges(pre))
    f.fail(Errc::unsupported, std::string("model.ignore_merges = ") + (ignore ? "true" : "false") +
                                  " with the '" + pre + "' pre-tokenizer; kvzip's '" + pre +
                                  "' has it " + (ignore ? "off" : "on"));
  if (const json* norm = f.member("normalizer")) {
    // Qwen2's NFC is accepted but not applied: it changes only text that is not already in NFC
    // (composed), which is what nearly all text is; such text may tokenize differently.
    const std::string t = type_of(*norm);
    const bool empty_seq =
        t == "Sequence" && norm->contains("normalizers") && (*norm)["normalizers"].empty();
    if (t != "NFC" && !empty_seq)
      f.fail(Errc::unsupported,
             "normalizer '" + t + "' is not supported (byte-level BPE takes text as is)");
  }
  if (const json* dec = f.member("decoder"); dec && type_of(*dec) != "ByteLevel")
    f.fail(Errc::unsupported, "decoder '" + type_of(*dec) +
                                  "' is not supported; byte-level BPE decodes with ByteLevel");
}

// A special token named in tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> token_text(const JsonFile& f, const char* key) {
  const json* v = f.member(key);
  if (!v) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object() && v->contains("content") && (*v)["content"].is_string())
    return (*v)["content"].get<std::string>();
  f.fail(Errc::corrupt,
         std::string("key '") + key + "' is neither a string nor {\"content\": ...}");
}

// config.json's bos/eos_token_id: an integer or a list (the first is the main one).
std::optional<uint64_t> config_id(const JsonFile& f, const char* key) {
  const json* v = f.member(key);
  if (v && v->is_array()) {
    if (v->empty()) return std::nullopt;
    if (!(*v)[0].is_number_unsigned())
      f.fail(Errc::corrupt, std::string("key '") + key + "' holds a non-integer");
    return (*v)[0].get<uint64_t>();
  }
  return f.opt_uint(key);
}

// Whether the post-processor's single-sequence template starts with the bos token (Llama 3 adds it
// that way; tokenizer_config.json's add_bos_token, when present, takes precedence).
bool template_adds(const json* post, const std::string& bos) {
  if (!post) return false;
  if (type_of(*post) == "Sequence" && post->contains("processors"))
    for (const json& p : (*post)["processors"])
      if (template_adds(&p, bos)) return true;
  if (type_of(*post) != "TemplateProcessing" || !post->contains("single") ||
      !(*post)["single"].is_array() || (*post)["single"].empty())
    return false;
  const json& first = (*post)["single"][0];
  return first.is_object() && first.contains("SpecialToken") &&
         first["SpecialToken"].value("id", "") == bos;
}

std::optional<std::string> template_from_config(const JsonFile& tc) {
  const json* t = tc.member("chat_template");
  if (!t) return std::nullopt;
  if (t->is_string()) return t->get<std::string>();
  if (t->is_array()) {  // [{"name": "default", "template": ...}, ...]
    for (const json& e : *t)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
          e["template"].is_string())
        return e["template"].get<std::string>();
    if (!t->empty() && (*t)[0].is_object() && (*t)[0].contains("template") &&
        (*t)[0]["template"].is_string())
      return (*t)[0]["template"].get<std::string>();
  }
  tc.fail(Errc::corrupt, "key 'chat_template' is neither a string nor a list of named templates");
}

// model.vocab and added_tokens into d.tokens/d.token_types (vocab_size entries; ids no file names
// become "[PADi]" of type Unused); returns added_tokens' content -> id.
std::map<std::string, int32_t> read_vocab(const JsonFile& f, const json& model, bool spm,
                                          uint32_t vocab_size, TokenizerData& d) {
  d.tokens.assign(vocab_size, std::string());
  d.token_types.assign(vocab_size, 0);
  std::vector<bool> have(vocab_size, false);
  auto place = [&](uint64_t id, const std::string& text, int32_t type, const char* where) {
    if (id >= vocab_size)
      f.fail(Errc::corrupt,
             std::string(where) + " token '" + text + "' has id " + std::to_string(id) +
                 " but the model's vocab_size (config.json) is " + std::to_string(vocab_size));
    if (have[id] && type == int32_t(TokenType::Normal))
      f.fail(Errc::corrupt, "model.vocab gives id " + std::to_string(id) + " to both '" +
                                d.tokens[id] + "' and '" + text + "'");
    d.tokens[id] = text, d.token_types[id] = type, have[id] = true;
  };
  const json* vocab = f.member("vocab", &model);
  if (!vocab || !vocab->is_object()) f.fail(Errc::corrupt, "missing object 'model.vocab'");
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_unsigned())
      f.fail(Errc::corrupt, "model.vocab['" + it.key() + "'] is not a non-negative integer id");
    place(it.value().get<uint64_t>(), it.key(), int32_t(TokenType::Normal), "model.vocab");
  }
  std::map<std::string, int32_t> added;  // content -> id
  if (const json* at = f.member("added_tokens")) {
    if (!at->is_array()) f.fail(Errc::corrupt, "'added_tokens' is not a list");
    for (const json& t : *at) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_unsigned() ||
          !t.contains("content") || !t["content"].is_string())
        f.fail(Errc::corrupt,
               "an added_tokens entry lacks an integer 'id' or a string 'content': " + t.dump());
      const bool special = t.value("special", false);
      const std::string content = t["content"].get<std::string>();
      place(t["id"].get<uint64_t>(), content,
            int32_t(special ? TokenType::Control : TokenType::UserDefined), "added_tokens");
      added[content] = int32_t(t["id"].get<uint64_t>());
    }
  }
  auto byte_token = [](const std::string& t) {
    return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
           std::isxdigit((unsigned char)t[3]) && std::isxdigit((unsigned char)t[4]);
  };
  for (uint32_t i = 0; i < vocab_size; ++i)
    if (!have[i])
      d.tokens[i] = "[PAD" + std::to_string(i) + "]", d.token_types[i] = int32_t(TokenType::Unused);
    else if (d.token_types[i] == 0 ||
             (spm && d.token_types[i] == int32_t(TokenType::Normal) && byte_token(d.tokens[i])))
      d.token_types[i] =
          int32_t(spm && byte_token(d.tokens[i]) ? TokenType::Byte : TokenType::Normal);
  return added;
}

// model.merges, as "left right" strings or [left, right] pairs, into d.merges.
void read_merges(const JsonFile& f, const json& model, TokenizerData& d) {
  const json* merges = f.member("merges", &model);
  if (!merges || !merges->is_array()) f.fail(Errc::corrupt, "missing list 'model.merges'");
  d.merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    if (m.is_string()) {
      d.merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      const std::string l = m[0].get<std::string>(), r = m[1].get<std::string>();
      // kvzip merges are "left right"; a part holding a space could not be split back.
      if (l.find(' ') != std::string::npos || r.find(' ') != std::string::npos)
        f.fail(Errc::unsupported,
               "merge " + std::to_string(i) + " " + m.dump() +
                   " has a space inside a part, which kvzip's \"left right\" merges cannot hold");
      d.merges.push_back(l + " " + r);
    } else {
      f.fail(Errc::corrupt, "model.merges[" + std::to_string(i) + "] is " + m.dump() +
                                ", expected \"left right\" or [left, right]");
    }
  }
}

// The special ids (bos, eos, pad, unk, eot) and add_bos, from tokenizer_config.json's token texts
// where it has them, else config.json's ids.
void read_special_ids(const JsonFile& f, const json& model, const JsonFile* tc,
                      const JsonFile& config, const std::map<std::string, int32_t>& added, bool spm,
                      uint32_t vocab_size, TokenizerData& d) {
  const json* vocab = f.member("vocab", &model);
  auto id_of = [&](const std::string& text, const JsonFile& src, const char* key) -> int32_t {
    if (auto a = added.find(text); a != added.end()) return a->second;
    if (auto v = vocab->find(text); v != vocab->end()) return int32_t(v->get<uint64_t>());
    src.fail(Errc::corrupt, std::string("key '") + key + "' names the token '" + text +
                                "', which tokenizer.json does not have");
  };
  auto from_config = [&](const char* key) -> int32_t {
    std::optional<uint64_t> id = config_id(config, key);
    if (!id) return -1;
    if (*id >= vocab_size)
      config.fail(Errc::corrupt, std::string("key '") + key + "' = " + std::to_string(*id) +
                                     " is outside the vocabulary of " + std::to_string(vocab_size));
    return int32_t(*id);
  };
  std::optional<std::string> bos_text = tc ? token_text(*tc, "bos_token") : std::nullopt;
  d.bos = bos_text ? id_of(*bos_text, *tc, "bos_token") : from_config("bos_token_id");
  std::optional<std::string> eos_text = tc ? token_text(*tc, "eos_token") : std::nullopt;
  d.eos = eos_text ? id_of(*eos_text, *tc, "eos_token") : from_config("eos_token_id");
  if (auto pad = tc ? token_text(*tc, "pad_token") : std::nullopt)
    d.pad = id_of(*pad, *tc, "pad_token");
  if (auto unk = f.opt_string("unk_token", &model, "model.unk_token")) {
    d.unk = id_of(*unk, f, "model.unk_token");
    if (spm && d.token_types[size_t(d.unk)] == int32_t(TokenType::Normal))
      d.token_types[size_t(d.unk)] = int32_t(TokenType::Unknown);
  }
  for (const char* eot : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"})
    if (auto a = added.find(eot);
        a != added.end() && d.token_types[a->second] == int32_t(TokenType::Control)) {
      d.eot = a->second;
      break;
    }
  std::optional<bool> add_bos = tc ? tc->opt_bool("add_bos_token") : std::nullopt;
  d.add_bos =
      add_bos ? *add_bos
              : d.bos >= 0 && template_adds(f.member("post_processor"), d.tokens[size_t(d.bos)]);
}

}  // namespace

TokenizerData hf_tokenizer_from_json(const JsonFile& f, const JsonFile* tc, const JsonFile& config,
                                     const std::optional<std::string>& chat_template,
                                     uint32_t vocab_size) {
  const json* model = f.member("model");
  if (!model || !model->is_object()) f.fail(Errc::corrupt, "missing object 'model'");
  TokenizerData d;
  const bool spm = model->value("byte_fallback", false) && type_of(*model) == "BPE";
  if (spm) {
    spm_layout(f, *model, d);
  } else {
    d.model = "gpt2";
    d.pre = recognise_pre(f, f.member("pre_tokenizer"));
    check_model_and_normalizer(f, *model, d.pre);
  }
  const std::map<std::string, int32_t> added = read_vocab(f, *model, spm, vocab_size, d);
  read_merges(f, *model, d);
  read_special_ids(f, *model, tc, config, added, spm, vocab_size, d);
  if (chat_template) d.chat_template = *chat_template;
  else if (tc) d.chat_template = template_from_config(*tc).value_or("");
  return d;
}

}  // namespace kvzip::model::detail
