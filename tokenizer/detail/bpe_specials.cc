// Leftmost-longest added-token matching. The candidates at a position are those whose first byte
// matches, tried longest first, so the first hit is the longest; a scan over positions gives the
// leftmost. Cost is O(text * candidates sharing a first byte), small for real vocabularies.
#include "tokenizer/detail/bpe_specials.h"

#include <algorithm>
#include <cstring>

namespace kvzip::model::detail {

void SpecialMatcher::add(std::string text, int32_t id) {
  if (text.empty()) return;
  auto b = static_cast<uint8_t>(text[0]);
  entries_.push_back({std::move(text), id});
  auto& bucket = first_[b];
  bucket.push_back(static_cast<uint32_t>(entries_.size() - 1));
  std::stable_sort(bucket.begin(), bucket.end(), [&](uint32_t x, uint32_t y) {
    return entries_[x].text.size() > entries_[y].text.size();
  });
  any_first_[b] = true;
}

SpecialMatcher::Match SpecialMatcher::find(std::string_view text, size_t from) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    auto b = static_cast<uint8_t>(text[pos]);
    if (!any_first_[b]) continue;
    for (uint32_t e : first_[b]) {
      const std::string& t = entries_[e].text;
      if (t.size() <= text.size() - pos && std::memcmp(text.data() + pos, t.data(), t.size()) == 0)
        return {pos, t.size(), entries_[e].id};
    }
  }
  return {};
}

}  // namespace kvzip::model::detail
