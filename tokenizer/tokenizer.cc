// Tokenizer: validation of TokenizerData, the encode pipeline (added-token split -> UTF-8 runs ->
// pre-tokenizer -> BPE per word, with a per-call word cache; or added-token split ->
// SentencePiece-style BPE per fragment) and decoding. Invalid UTF-8 bytes are
// each encoded alone as their byte token and never reach PCRE2.
#include "tokenizer/tokenizer.h"

#include <optional>
#include <unordered_map>

#include "common/error.h"
#include "common/utf8.h"
#include "tokenizer/detail/bpe.h"
#include "tokenizer/detail/bpe_specials.h"
#include "tokenizer/detail/pretokenize.h"
#include "tokenizer/detail/spm.h"

namespace kvzip::model {

struct Tokenizer::Impl {
  TokenizerData data;
  std::optional<detail::BpeModel> bpe;  // gpt2
  std::optional<detail::PreTokenizer> pre;
  std::optional<detail::SpmModel> spm;      // llama
  detail::SpecialMatcher control_and_user;  // matched with parse_special
  detail::SpecialMatcher user_only;         // matched always
  std::vector<std::string> bytes;           // id -> decoded bytes

  explicit Impl(TokenizerData d) : data(std::move(d)) {}
};

namespace {

void check_basics(const TokenizerData& d) {
  if (d.model != "gpt2" && d.model != "llama")
    throw Error(Errc::unsupported,
                "tokenizer.ggml.model = \"" + d.model +
                    "\" is not supported; kvzip implements byte-level BPE (\"gpt2\") "
                    "and SentencePiece-style BPE (\"llama\")");
  if (d.tokens.empty())
    throw Error(Errc::corrupt, "tokenizer.ggml.tokens is empty; the model file has no vocabulary");
  if (!d.token_types.empty() && d.token_types.size() != d.tokens.size())
    throw Error(Errc::corrupt, "tokenizer.ggml.token_type has " +
                                   std::to_string(d.token_types.size()) +
                                   " entries but tokenizer.ggml.tokens has " +
                                   std::to_string(d.tokens.size()) + "; they must match");
  for (size_t i = 0; i < d.token_types.size(); ++i) {
    // 0 is llama.cpp's "undefined", treated as normal.
    if (d.token_types[i] < 0 || d.token_types[i] > 6)
      throw Error(Errc::corrupt, "tokenizer.ggml.token_type[" + std::to_string(i) +
                                     "] = " + std::to_string(d.token_types[i]) + ", expected 0..6");
  }
  const auto n = static_cast<int64_t>(d.tokens.size());
  const std::pair<const char*, int32_t> ids[] = {{"bos_token_id", d.bos},
                                                 {"eos_token_id", d.eos},
                                                 {"eot_token_id", d.eot},
                                                 {"unknown_token_id", d.unk},
                                                 {"padding_token_id", d.pad}};
  for (const auto& [name, id] : ids) {
    if (id < -1 || id >= n)
      throw Error(Errc::corrupt, std::string("tokenizer.ggml.") + name + " = " +
                                     std::to_string(id) + " is outside the vocabulary of " +
                                     std::to_string(n) + " tokens");
  }
}

TokenType type_of(const TokenizerData& d, int32_t id) {
  if (d.token_types.empty() || d.token_types[id] == 0) return TokenType::Normal;
  return static_cast<TokenType>(d.token_types[id]);
}

// Word -> range of its ids in `ids`; keys view the caller's text, which outlives the cache.
struct WordCache {
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> ranges;
  std::vector<int32_t> ids;
};

struct Encoders {
  const detail::PreTokenizer& pre;
  const detail::BpeModel& bpe;
};

void encode_words(const Encoders& t, std::string_view valid_text, WordCache& cache,
                  std::vector<std::string_view>& words, std::vector<int32_t>& out) {
  words.clear();
  t.pre.split(valid_text, words);
  for (std::string_view w : words) {
    auto it = cache.ranges.find(w);
    if (it == cache.ranges.end()) {
      auto begin = static_cast<uint32_t>(cache.ids.size());
      t.bpe.encode_word(w, t.pre.ignore_merges(), cache.ids);
      it = cache.ranges
               .emplace(w, std::make_pair(begin, static_cast<uint32_t>(cache.ids.size()) - begin))
               .first;
    }
    const int32_t* first = cache.ids.data() + it->second.first;
    out.insert(out.end(), first, first + it->second.second);
  }
}

// Text without added tokens: valid UTF-8 runs go through the pre-tokenizer; each invalid byte is a
// word of its own.
void encode_plain(const Encoders& t, std::string_view text, WordCache& cache,
                  std::vector<std::string_view>& words, std::vector<int32_t>& out) {
  size_t i = 0;
  while (i < text.size()) {
    size_t run = utf8_valid_run(text, i);
    if (run > 0) {
      encode_words(t, text.substr(i, run), cache, words, out);
      i += run;
    } else {
      t.bpe.encode_word(text.substr(i, 1), false, out);
      ++i;
    }
  }
}

}  // namespace

bool pre_tokenizer_ignores_merges(std::string_view pre) {
  return detail::pre_tokenizer_spec(pre).ignore_merges;
}

Tokenizer::Tokenizer(TokenizerData data) {
  check_basics(data);
  impl_ = std::make_unique<Impl>(std::move(data));
  const TokenizerData& d = impl_->data;
  const bool spm = d.model == "llama";
  if (spm && d.ranked_merges) {  // a tokenizer.json: ranked merges
    impl_->spm.emplace(d.tokens, d.merges, d.unk, d.split_words);
  } else if (spm) {
    impl_->spm.emplace(d.tokens, d.scores, d.unk);
  } else {
    impl_->pre.emplace(d.pre);  // throws unsupported for an unknown name
    impl_->bpe.emplace(d.tokens, d.merges);
  }
  impl_->bytes.reserve(d.tokens.size());
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    TokenType ty = type_of(d, static_cast<int32_t>(i));
    bool added = ty == TokenType::Control || ty == TokenType::UserDefined;
    impl_->bytes.push_back(added ? d.tokens[i]
                           : spm ? detail::spm_token_bytes(d.tokens[i], ty == TokenType::Byte)
                                 : detail::byte_level_decode(d.tokens[i]));
    if (added) impl_->control_and_user.add(d.tokens[i], static_cast<int32_t>(i));
    if (ty == TokenType::UserDefined) impl_->user_only.add(d.tokens[i], static_cast<int32_t>(i));
  }
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  const detail::SpecialMatcher& added = parse_special ? impl_->control_and_user : impl_->user_only;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  WordCache cache;
  std::vector<std::string_view> words;
  const detail::SpmModel* spm = impl_->spm ? &*impl_->spm : nullptr;
  size_t pos = 0;
  bool after_added =
      true;  // llama.cpp's space prefix: the first fragment and those after added tokens
  while (pos < text.size()) {
    detail::SpecialMatcher::Match hit =
        added.empty() ? detail::SpecialMatcher::Match{} : added.find(text, pos);
    size_t end = hit.len > 0 ? hit.pos : text.size();
    if (spm) {
      const TokenizerData& d = impl_->data;
      const bool prefix =
          d.add_space_prefix && (d.space_prefix_first_only ? pos == 0 : after_added) &&
          !(d.prefix_unless_space && end > pos &&
            (text[pos] == ' ' || text.substr(pos, end - pos).starts_with("\xE2\x96\x81")));
      if (end > pos) spm->encode(text.substr(pos, end - pos), prefix, out);
    } else {
      encode_plain(Encoders{*impl_->pre, *impl_->bpe}, text.substr(pos, end - pos), cache, words,
                   out);
    }
    after_added = hit.len > 0;
    if (hit.len == 0) break;
    out.push_back(hit.id);
    pos = hit.pos + hit.len;
  }
  return out;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    throw Error(Errc::invalid_argument, "token id " + std::to_string(id) +
                                            " is outside the vocabulary of " +
                                            std::to_string(vocab_size()) + " tokens");
  return impl_->bytes[id];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

const std::string& Tokenizer::token_text(int32_t id) const {
  token_bytes(id);  // range check
  return impl_->data.tokens[id];
}

int32_t Tokenizer::token_id(std::string_view text) const {
  return impl_->spm ? impl_->spm->find(text) : impl_->bpe->find(text);
}
int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->data.tokens.size()); }

TokenType Tokenizer::token_type(int32_t id) const {
  token_bytes(id);  // range check
  return type_of(impl_->data, id);
}

bool Tokenizer::is_special(int32_t id) const {
  TokenType t = token_type(id);
  return t == TokenType::Control || t == TokenType::UserDefined;
}

int32_t Tokenizer::bos() const { return impl_->data.bos; }
int32_t Tokenizer::eos() const { return impl_->data.eos; }
int32_t Tokenizer::eot() const { return impl_->data.eot; }
int32_t Tokenizer::unk() const { return impl_->data.unk; }
int32_t Tokenizer::pad() const { return impl_->data.pad; }
bool Tokenizer::add_bos() const { return impl_->data.add_bos; }
const std::string& Tokenizer::pre() const { return impl_->data.pre; }
const std::string& Tokenizer::model() const { return impl_->data.model; }
const std::string& Tokenizer::chat_template() const { return impl_->data.chat_template; }

std::string StreamDecoder::push(int32_t id) {
  pending_ += tokenizer_->token_bytes(id);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    Utf8Step st = utf8_step(pending_, i);
    if (st.status == Utf8Status::incomplete) break;  // wait for the next token
    if (st.status == Utf8Status::ok) out.append(pending_, i, st.len);
    else out += "\xEF\xBF\xBD";  // U+FFFD for each maximal ill-formed subpart
    i += st.len;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = pending_.empty() ? std::string() : std::string("\xEF\xBF\xBD");
  pending_.clear();
  return out;
}

}  // namespace kvzip::model
