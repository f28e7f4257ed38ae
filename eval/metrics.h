// Answer-quality metrics of the evaluation (spec/methods.md §5): SQuAD answer normalisation and
// token F1 as the official SQuAD v2.0 script computes them, contains-answer, and the KL
// divergence between two first-token distributions given as logits. Scores are fractions in
// [0, 1]; the report turns them into percentages.
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvzip::eval {

// The official normalisation: lowercase, drop ASCII punctuation (Python's string.punctuation),
// drop the words "a", "an", "the", collapse whitespace. Lowercasing covers ASCII and Latin-1
// letters (À-Þ); other text passes through unchanged. Article words are matched as whole words,
// a word being a run of letters, digits, '_' or non-ASCII letters (as Python's \b with UNICODE).
std::string normalize_answer(std::string_view text);

// Whitespace-separated tokens of the normalised text.
std::vector<std::string> answer_tokens(std::string_view text);

// Token-overlap F1 of one prediction against one gold answer (multiset overlap of normalised
// tokens). As in the SQuAD v2.0 script, when either side has no tokens the F1 is 1 if both are
// empty and 0 otherwise.
double f1_score(std::string_view prediction, std::string_view gold);

// Answer-to-answer agreement that tolerates wording: the token F1 of two answers to the same
// question (normalised as above, symmetric), e.g. the compressed cache's answer against the full
// cache's. "Paris." against "paris" is 1 where an exact-string comparison says they differ.
double answer_f1(std::string_view a, std::string_view b);

// The best F1 over the gold answers; an empty list means "no answer" (SQuAD v2 unanswerable
// questions) and is scored against the single gold answer "".
double max_f1(std::string_view prediction, const std::vector<std::string>& golds);

// Whether the normalised gold answer occurs in the normalised prediction as a run of whole
// tokens ("france" is in "paris france", not in "frances"). An empty gold answer is contained
// only in an empty prediction.
bool contains_answer(std::string_view prediction, std::string_view gold);
// contains_answer for any of the golds (empty list: as the gold answer "").
bool contains_any(std::string_view prediction, const std::vector<std::string>& golds);

// KL(P || Q) in nats where P = softmax(p_logits) and Q = softmax(q_logits), in double precision.
// 0 for identical logits. Throws Errc::invalid_argument when the sizes differ or are 0.
double kl_divergence(std::span<const float> p_logits, std::span<const float> q_logits);

}  // namespace kvzip::eval
