// Splitting text on added tokens (control and user-defined), done before pre-tokenization as
// Hugging Face AddedVocabulary does: leftmost-longest matching on the raw bytes. Tokens with empty
// text never match.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvzip::model::detail {

class SpecialMatcher {
 public:
  struct Match {
    size_t pos = 0;  // byte offset in the text
    size_t len = 0;  // 0 when there is no match
    int32_t id = -1;
  };

  void add(std::string text, int32_t id);
  bool empty() const { return entries_.empty(); }

  // The leftmost match at or after `from`; among matches at that position, the longest.
  Match find(std::string_view text, size_t from) const;

 private:
  struct Entry {
    std::string text;
    int32_t id;
  };
  std::vector<Entry> entries_;
  std::vector<uint32_t> first_[256];  // indices into entries_ by first byte, longest text first
  bool any_first_[256] = {};
};

}  // namespace kvzip::model::detail
