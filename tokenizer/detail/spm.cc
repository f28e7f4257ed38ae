// SentencePiece-style BPE merge loop (see spm.h): a doubly linked list of symbols and a max-heap of
// candidate pairs keyed by (score, -left), stale entries skipped when popped, as llama.cpp's
// llm_tokenizer_spm does, so the ids equal llama-tokenize's.
#include "tokenizer/detail/spm.h"

#include <cstdio>
#include <queue>

#include "common/error.h"
#include "common/utf8.h"

namespace kvzip::model::detail {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581

struct Symbol {
  int32_t prev, next;
  uint32_t begin, len;  // bytes of the escaped text
};

struct Pair {
  float score;
  int32_t left;
  uint32_t len;  // bytes of left+right when queued: a changed symbol makes the entry stale
  bool operator<(const Pair& o) const {
    return score < o.score || (score == o.score && left > o.left);
  }
};

}  // namespace

SpmModel::SpmModel(const std::vector<std::string>& tokens, const std::vector<float>& scores,
                   int32_t unk)
    : scores_(scores), unk_(unk) {
  if (scores.size() != tokens.size())
    throw Error(Errc::corrupt, "tokenizer.ggml.scores has " + std::to_string(scores.size()) +
                                   " entries but tokenizer.ggml.tokens has " +
                                   std::to_string(tokens.size()) +
                                   "; a SentencePiece vocabulary needs one score per token");
  index_.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i)
    index_[tokens[i]] = static_cast<int32_t>(i);  // later id wins
  init_bytes();
}

SpmModel::SpmModel(const std::vector<std::string>& tokens, const std::vector<std::string>& merges,
                   int32_t unk, bool split_words)
    : unk_(unk), split_words_(split_words) {
  ranked_.emplace(tokens, merges);  // validates every merge against the vocabulary
  index_.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) index_[tokens[i]] = static_cast<int32_t>(i);
  init_bytes();
}

void SpmModel::init_bytes() {
  byte_ids_.fill(-1);
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    byte_ids_[b] = find(buf);
  }
}

int32_t SpmModel::find(std::string_view text) const {
  auto it = index_.find(text);
  return it == index_.end() ? -1 : it->second;
}

void SpmModel::encode(std::string_view raw, bool space_prefix, std::vector<int32_t>& out) const {
  std::string text;
  text.reserve(raw.size() + 8);
  if (space_prefix) text += kSpace;
  for (char ch : raw) {
    if (ch == ' ') text += kSpace;
    else text += ch;
  }
  if (text.empty()) return;
  if (ranked_) {
    if (!split_words_) return encode_ranked(text, out);
    for (size_t b = 0; b < text.size();) {  // words start at every "▁" (MergedWithNext)
      size_t e = text.find(kSpace, b + 1);
      if (e == std::string::npos) e = text.size();
      encode_ranked(std::string_view(text).substr(b, e - b), out);
      b = e;
    }
    return;
  }
  std::vector<Symbol> sym;
  sym.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Step st = utf8_step(text, i);
    const uint32_t n = st.status == Utf8Status::ok ? uint32_t(st.len) : 1u;
    const int32_t idx = static_cast<int32_t>(sym.size());
    sym.push_back(Symbol{idx - 1, -1, uint32_t(i), n});
    if (idx > 0) sym[idx - 1].next = idx;
    i += n;
  }
  std::priority_queue<Pair> heap;
  auto try_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const uint32_t len = sym[l].len + sym[r].len;
    const int32_t id = find(std::string_view(text).substr(sym[l].begin, len));
    if (id >= 0) heap.push(Pair{scores_[id], l, len});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_pair(int32_t(i - 1), int32_t(i));
  while (!heap.empty()) {
    const Pair p = heap.top();
    heap.pop();
    Symbol& l = sym[p.left];
    if (l.len == 0 || l.next < 0) continue;
    Symbol& r = sym[l.next];
    if (l.len + r.len != p.len) continue;  // one side changed since the pair was queued
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = p.left;
    try_pair(l.prev, p.left);
    try_pair(p.left, l.next);
  }
  for (int32_t i = 0; i >= 0 && i < int32_t(sym.size()); i = sym[i].next) {
    const std::string_view piece = std::string_view(text).substr(sym[i].begin, sym[i].len);
    const int32_t id = find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (unsigned char b : piece) {  // a character the vocabulary lacks: its bytes
      const int32_t bid = byte_ids_[b];
      if (bid >= 0) out.push_back(bid);
      else if (unk_ >= 0) out.push_back(unk_);
    }
  }
}

// Hugging Face's BPE word: each character's token, or its bytes' tokens when it has none (all of
// them, else one unk; consecutive unks fuse, as fuse_unk does), then the ranked merges.
void SpmModel::encode_ranked(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Step st = utf8_step(text, i);
    const size_t n = st.status == Utf8Status::ok ? st.len : 1u;
    const std::string_view ch = text.substr(i, n);
    i += n;
    if (const int32_t id = find(ch); id >= 0) {
      ids.push_back(id);
      continue;
    }
    bool all = true;
    for (unsigned char b : ch) all &= byte_ids_[b] >= 0;
    if (all) {
      for (unsigned char b : ch) ids.push_back(byte_ids_[b]);
    } else if (unk_ >= 0 && (ids.empty() || ids.back() != unk_)) {
      ids.push_back(unk_);
    }
  }
  ranked_->merge(ids, out);
}

std::string spm_token_bytes(std::string_view text, bool is_byte_token) {
  if (is_byte_token && text.size() == 6 && text.substr(0, 3) == "<0x" && text[5] == '>') {
    unsigned v = 0;
    if (std::sscanf(std::string(text.substr(3, 2)).c_str(), "%2x", &v) == 1)
      return std::string(1, char(v));
  }
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.substr(i, 3) == kSpace) {
      out += ' ';
      i += 3;
    } else {
      out += text[i++];
    }
  }
  return out;
}

}  // namespace kvzip::model::detail
