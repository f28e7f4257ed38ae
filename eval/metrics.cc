// SQuAD metrics and first-token KL (see metrics.h). The normalisation follows the official
// evaluate-v2.0.py step order: lower -> remove punctuation -> remove articles -> fix whitespace.
#include "eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/error.h"

namespace kvzip::eval {
namespace {

// Python's string.punctuation.
bool is_ascii_punct(unsigned char c) {
  return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
         (c >= 123 && c <= 126);
}

// Decodes the code point at s[i] (valid UTF-8 assumed; a stray byte decodes as itself) and its
// length in bytes.
uint32_t code_point(std::string_view s, size_t i, size_t* len) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  if (i + n > s.size()) n = 1;
  if (n == 1) {
    *len = 1;
    return c;
  }
  uint32_t cp = c & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  *len = n;
  return cp;
}

// Python's str.split() whitespace.
bool is_space(uint32_t cp) {
  return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F) || cp == 0x85 ||
         cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// A \w character for the article regex: ASCII letters, digits and '_', and non-ASCII code points
// outside the Latin-1 symbol range, the general and CJK punctuation blocks, and whitespace.
bool is_word(uint32_t cp) {
  if (cp < 0x80)
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
           cp == '_';
  if (cp <= 0xBF || cp == 0xD7 || cp == 0xF7) return false;
  if (cp >= 0x2000 && cp <= 0x206F) return false;
  if (cp >= 0x3000 && cp <= 0x303F) return false;
  return !is_space(cp);
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (size_t i = 0; i < out.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(out[i]);
    if (c >= 'A' && c <= 'Z') {
      out[i] = char(c + 32);
    } else if (c == 0xC3 && i + 1 < out.size()) {  // U+00C0..U+00DE except U+00D7 (×)
      const unsigned char d = static_cast<unsigned char>(out[i + 1]);
      if (d >= 0x80 && d <= 0x9E && d != 0x97) out[i + 1] = char(d + 0x20);
      ++i;
    }
  }
  return out;
}

std::string remove_punct(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s)
    if (!is_ascii_punct(static_cast<unsigned char>(c))) out += c;
  return out;
}

std::string remove_articles(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    if (!is_word(code_point(s, i, &len))) {
      out.append(s.substr(i, len));
      i += len;
      continue;
    }
    size_t j = i;
    while (j < s.size()) {
      size_t l = 0;
      if (!is_word(code_point(s, j, &l))) break;
      j += l;
    }
    const std::string_view word = s.substr(i, j - i);
    out += (word == "a" || word == "an" || word == "the") ? std::string_view(" ") : word;
    i = j;
  }
  return out;
}

std::vector<std::string> split_ws(std::string_view s) {
  std::vector<std::string> words;
  std::string cur;
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    if (is_space(code_point(s, i, &len))) {
      if (!cur.empty()) words.push_back(std::move(cur)), cur.clear();
    } else {
      cur.append(s.substr(i, len));
    }
    i += len;
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  return words;
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

}  // namespace

std::string normalize_answer(std::string_view text) {
  return join(split_ws(remove_articles(remove_punct(lower(text)))));
}

std::vector<std::string> answer_tokens(std::string_view text) {
  return split_ws(normalize_answer(text));
}

double f1_score(std::string_view prediction, std::string_view gold) {
  const std::vector<std::string> p = answer_tokens(prediction), g = answer_tokens(gold);
  if (p.empty() || g.empty()) return p.empty() && g.empty() ? 1.0 : 0.0;
  std::map<std::string, int> gold_count;
  for (const std::string& t : g) ++gold_count[t];
  int same = 0;
  for (const std::string& t : p) {
    auto it = gold_count.find(t);
    if (it != gold_count.end() && it->second > 0) --it->second, ++same;
  }
  if (same == 0) return 0.0;
  const double precision = double(same) / double(p.size());
  const double recall = double(same) / double(g.size());
  return 2.0 * precision * recall / (precision + recall);
}

// Precision and recall swap with the sides, and F1 is symmetric in them.
double answer_f1(std::string_view a, std::string_view b) { return f1_score(a, b); }

double max_f1(std::string_view prediction, const std::vector<std::string>& golds) {
  if (golds.empty()) return f1_score(prediction, "");
  double best = 0.0;
  for (const std::string& g : golds) best = std::max(best, f1_score(prediction, g));
  return best;
}

bool contains_answer(std::string_view prediction, std::string_view gold) {
  const std::string p = normalize_answer(prediction), g = normalize_answer(gold);
  if (g.empty()) return p.empty();
  return (" " + p + " ").find(" " + g + " ") != std::string::npos;
}

bool contains_any(std::string_view prediction, const std::vector<std::string>& golds) {
  if (golds.empty()) return contains_answer(prediction, "");
  return std::any_of(golds.begin(), golds.end(),
                     [&](const std::string& g) { return contains_answer(prediction, g); });
}

double kl_divergence(std::span<const float> p_logits, std::span<const float> q_logits) {
  if (p_logits.empty() || p_logits.size() != q_logits.size())
    throw Error(Errc::invalid_argument,
                "kl_divergence: distributions over " + std::to_string(p_logits.size()) + " and " +
                    std::to_string(q_logits.size()) + " tokens; expected the same non-zero size");
  // log-sum-exp of each side, then KL = sum p_i (log p_i - log q_i).
  auto log_norm = [](std::span<const float> x) {
    const double mx = *std::max_element(x.begin(), x.end());
    double sum = 0.0;
    for (float v : x) sum += std::exp(double(v) - mx);
    return mx + std::log(sum);
  };
  const double zp = log_norm(p_logits), zq = log_norm(q_logits);
  double kl = 0.0;
  for (size_t i = 0; i < p_logits.size(); ++i) {
    const double lp = double(p_logits[i]) - zp, lq = double(q_logits[i]) - zq;
    kl += std::exp(lp) * (lp - lq);
  }
  return std::max(kl, 0.0);  // KL >= 0; rounding can leave a tiny negative for near-equal inputs
}

}  // namespace kvzip::eval
