// Byte-level BPE: alphabet tables, vocabulary/merge validation, and the merge loop (lowest rank
// first, leftmost on ties; a min-heap over candidate pairs with lazy deletion, O(n log n) per
// word). Matches Hugging Face's BPE model without an unk token: a byte missing from the vocabulary
// vanishes.
#include "tokenizer/detail/bpe.h"

#include <queue>

#include "common/error.h"
#include "common/utf8.h"

namespace kvzip::model::detail {
namespace {

// The GPT-2 alphabet: the 188 printable bytes (0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF) stand for
// themselves; the other 68 bytes, in increasing order, get U+0100, U+0101, ...
struct Alphabet {
  std::array<uint32_t, 256> code_point{};
  std::array<std::string, 256> utf8;
  std::array<int16_t, 0x144> byte_of{};  // indexed by code point; the largest used is U+0143

  Alphabet() {
    byte_of.fill(-1);
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      code_point[b] = printable ? static_cast<uint32_t>(b) : next++;
      append_utf8(utf8[b], code_point[b]);
      byte_of[code_point[b]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t b) { return alphabet().utf8[b]; }

int unicode_to_byte(uint32_t cp) {
  const Alphabet& a = alphabet();
  return cp < a.byte_of.size() ? a.byte_of[cp] : -1;
}

std::string byte_level_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t len = 1;
    const uint32_t cp = utf8_decode(text, i, &len);  // kNoCodePoint maps to no byte
    i += len;
    int b = unicode_to_byte(cp);
    if (b < 0) return std::string(text);  // not byte-level text: taken verbatim, as HF does
    out += static_cast<char>(b);
  }
  return out;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += byte_to_unicode(static_cast<uint8_t>(c));
  return out;
}

BpeModel::BpeModel(const std::vector<std::string>& tokens, const std::vector<std::string>& merges) {
  index_.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) index_[tokens[i]] = static_cast<int32_t>(i);
  // A byte may lack a token (SmolLM2 has none for 21 bytes never seen in training): it is dropped.
  for (int b = 0; b < 256; ++b) byte_ids_[b] = find(byte_to_unicode(static_cast<uint8_t>(b)));
  merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string& m = merges[r];
    // "left right", split at the first space after index 0: a part may itself start with ' '.
    size_t cut = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    auto fail = [&](const std::string& why) {
      throw Error(Errc::corrupt, "tokenizer merge " + std::to_string(r) + " \"" + m + "\" " + why +
                                     "; the model file's tokenizer.ggml.merges is damaged");
    };
    if (cut == std::string::npos || cut + 1 >= m.size())
      fail("is not two parts separated by a space");
    std::string_view left = std::string_view(m).substr(0, cut),
                     right = std::string_view(m).substr(cut + 1);
    int32_t l = find(left), rt = find(right), res = find(std::string(left) + std::string(right));
    if (l < 0) fail("names a left part not in the vocabulary");
    if (rt < 0) fail("names a right part not in the vocabulary");
    if (res < 0) fail("produces a token not in the vocabulary");
    // A repeated pair keeps its first (highest-priority) rank.
    merges_.try_emplace(pair_key(l, rt), Merge{static_cast<int32_t>(r), res});
  }
}

int32_t BpeModel::find(std::string_view text) const {
  auto it = index_.find(text);
  return it == index_.end() ? -1 : it->second;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::encode_word(std::string_view word, bool ignore_merges,
                           std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    int32_t whole = find(byte_level_encode(word));
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  // Bytes without a token are left out before merging, so their neighbours can merge (as HF does).
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  for (char c : word) {
    int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id >= 0) ids.push_back(id);
  }
  merge(ids, out);
}

void BpeModel::merge(const std::vector<int32_t>& symbols, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;  // -1 once merged into its left neighbour
    int32_t prev, next;
  };
  std::vector<Symbol> sym;
  sym.reserve(symbols.size());
  for (int32_t id : symbols) sym.push_back({id, static_cast<int32_t>(sym.size()) - 1, -1});
  const auto n = static_cast<int32_t>(sym.size());
  if (n == 0) return;
  for (int32_t i = 0; i + 1 < n; ++i) sym[i].next = i + 1;

  // A candidate records the ids it saw; it is stale once either side has changed.
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, result;
  };
  auto worse = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> heap(worse);
  auto consider = [&](int32_t left) {
    int32_t right = sym[left].next;
    if (right < 0) return;
    if (const Merge* m = find_merge(sym[left].id, sym[right].id))
      heap.push({m->rank, left, right, sym[left].id, sym[right].id, m->result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);

  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& l = sym[c.left];
    Symbol& r = sym[c.right];
    if (l.id != c.left_id || l.next != c.right || r.id != c.right_id) continue;
    l.id = c.result;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    r.id = -1;
    if (l.prev >= 0) consider(l.prev);
    consider(c.left);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace kvzip::model::detail
