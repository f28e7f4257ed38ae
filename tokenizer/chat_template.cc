// ChatML and Llama 3 prompt rendering as token ids. Facts reproduced (from the templates):
//  ChatML  : [<|im_start|>system\n{sys}<|im_end|>\n] <|im_start|>user\n{user}<|im_end|>\n
//            <|im_start|>assistant\n ; the default system turn comes from the template text.
//  Llama 3 : <|begin_of_text|>[<|start_header_id|>system<|end_header_id|>\n\n{sys}<|eot_id|>]
//            <|start_header_id|>user<|end_header_id|>\n\n{user}<|eot_id|>
//            <|start_header_id|>assistant<|end_header_id|>\n\n ; contents are trimmed (`| trim`);
//            3.1+ templates always emit the system turn, opening with a knowledge/date header.
//  Gemma   : <bos><start_of_turn>user\n[{sys}\n\n]{user}<end_of_turn>\n<start_of_turn>model\n ;
//            contents trimmed; the system text opens the first user turn (Gemma has no system
//            role).
//  Plain   : <bos>[{sys}\n\n]{user}\nAnswer: ; later turns {answer}\n\n{user}\nAnswer: . Stops on
//            eos and on the newline tokens, so a base model's answer ends with its line.
//  Later turns (next_turn): {answer}<end of turn> then a user turn and the assistant opener as
//  above.
#include "tokenizer/chat_template.h"

#include <algorithm>

#include "common/error.h"

namespace kvzip::model {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kHeaderStart = "<|start_header_id|>";
constexpr std::string_view kHeaderEnd = "<|end_header_id|>";
constexpr std::string_view kBeginOfText = "<|begin_of_text|>";
constexpr std::string_view kEotId = "<|eot_id|>";
constexpr std::string_view kStartOfTurn = "<start_of_turn>";
constexpr std::string_view kEndOfTurn = "<end_of_turn>";
constexpr std::string_view kPlainAnswer = "\nAnswer:";
// Llama 3.1's template writes this header (with its fallback date) at the top of the system turn.
constexpr std::string_view kKnowledgeMarker = "Cutting Knowledge Date:";
constexpr std::string_view kLlama31Header =
    "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";

// Jinja's `trim` (Python str.strip) for the whitespace that occurs in practice.
std::string_view trim(std::string_view s) {
  constexpr std::string_view ws = " \t\n\r\f\v";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// Decodes the escapes of a Jinja string literal body; false if it holds an unescaped `quote`
// (the literal ended there, so the text is not one literal).
bool unescape_literal(std::string_view body, char quote, std::string& out) {
  out.clear();
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c == quote) return false;
    if (c != '\\' || i + 1 == body.size()) {
      out += c;
      continue;
    }
    char e = body[++i];
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      default: out += e; break;  // \\ \' \" and anything else: the character itself
    }
  }
  return true;
}

}  // namespace

std::string chatml_default_system(std::string_view jinja) {
  const std::string opener = std::string(kImStart) + "system";
  for (size_t at = jinja.find(opener); at != std::string_view::npos;
       at = jinja.find(opener, at + 1)) {
    if (at == 0) continue;
    char quote = jinja[at - 1];
    if (quote != '\'' && quote != '"') continue;  // not the start of a string literal
    size_t body = at + opener.size();
    if (jinja.substr(body, 1) == "\n") body += 1;
    else if (jinja.substr(body, 2) == "\\n") body += 2;
    else continue;
    size_t end = jinja.find(kImEnd, body);
    if (end == std::string_view::npos) break;
    std::string text;
    if (unescape_literal(jinja.substr(body, end - body), quote, text) && !text.empty()) return text;
  }
  return {};
}

ChatTemplate::ChatTemplate(const Tokenizer& tokenizer)
    : tok_(&tokenizer), format_(ChatFormat::ChatMl) {
  const std::string& t = tokenizer.chat_template();
  if (t.find(kImStart) != std::string::npos) {
    format_ = ChatFormat::ChatMl;
    default_system_ = chatml_default_system(t);
  } else if (t.find(kHeaderStart) != std::string::npos) {
    format_ = ChatFormat::Llama3;
    if (t.find(kKnowledgeMarker) != std::string::npos) system_header_ = kLlama31Header;
  } else if (t.find(kStartOfTurn) != std::string::npos) {
    format_ = ChatFormat::Gemma;
  } else if (t.empty() && tokenizer.token_id(kImStart) >= 0 && tokenizer.token_id(kImEnd) >= 0) {
    format_ = ChatFormat::ChatMl;  // no template: ChatML, the vocabulary has its tokens
  } else if (t.empty()) {
    format_ = ChatFormat::Plain;  // a base model: document, question, answer
  } else {
    std::string head = t.substr(0, 60);
    throw Error(
        Errc::unsupported,
        t.empty()
            ? std::string("the model has no tokenizer.chat_template and its vocabulary has no "
                          "ChatML tokens; kvzip cannot build chat prompts for it")
            : "tokenizer.chat_template is neither ChatML (<|im_start|>) nor Llama 3 "
              "(<|start_header_id|>); it begins \"" +
                  head + "\". Use a ChatML or Llama 3 model");
  }
  init_tokens();
}

ChatTemplate::ChatTemplate(const Tokenizer& tokenizer, ChatFormat format,
                           std::string default_system)
    : tok_(&tokenizer), format_(format), default_system_(std::move(default_system)) {
  init_tokens();
}

int32_t ChatTemplate::require_token(std::string_view text) const {
  int32_t id = tok_->token_id(text);
  if (id < 0)
    throw Error(Errc::corrupt,
                "the chat template needs the token \"" + std::string(text) +
                    "\" but the vocabulary has no such token; the model file's tokenizer "
                    "does not match its template");
  return id;
}

void ChatTemplate::init_tokens() {
  if (format_ == ChatFormat::Gemma || format_ == ChatFormat::Plain) {
    trim_messages_ = format_ == ChatFormat::Gemma;
    begin_ = tok_->add_bos() ? tok_->bos() : -1;
    if (format_ == ChatFormat::Plain) return;
    turn_open_ = require_token(kStartOfTurn);
    turn_close_ = require_token(kEndOfTurn);
    return;
  }
  if (format_ == ChatFormat::ChatMl) {
    turn_open_ = require_token(kImStart);
    turn_close_ = require_token(kImEnd);
    return;
  }
  trim_messages_ = true;
  begin_ = tok_->token_id(kBeginOfText);
  if (begin_ < 0) begin_ = tok_->bos();
  if (begin_ < 0) begin_ = require_token(kBeginOfText);  // throws with the token's name
  turn_open_ = require_token(kHeaderStart);
  header_close_ = require_token(kHeaderEnd);
  turn_close_ = require_token(kEotId);
}

void ChatTemplate::add_prefix(Pieces& p, std::string_view system) const {
  if (format_ == ChatFormat::Gemma || format_ == ChatFormat::Plain) {
    if (begin_ >= 0) p.push_back({begin_, ""});
    if (format_ == ChatFormat::Gemma) {
      p.push_back({turn_open_, ""});
      p.push_back({-1, "user\n"});
    }
    std::string_view sys = system.empty() ? std::string_view(default_system_) : system;
    if (trim_messages_) sys = trim(sys);
    if (!sys.empty()) p.push_back({-1, std::string(sys) + "\n\n"});
    return;
  }
  if (format_ == ChatFormat::ChatMl) {
    std::string_view sys = system.empty() ? std::string_view(default_system_) : system;
    if (!sys.empty()) {
      p.push_back({turn_open_, ""});
      p.push_back({-1, "system\n" + std::string(sys)});
      p.push_back({turn_close_, ""});
      p.push_back({-1, "\n"});
    }
    p.push_back({turn_open_, ""});
    p.push_back({-1, "user\n"});
    return;
  }
  p.push_back({begin_, ""});
  std::string_view sys = trim(system.empty() ? std::string_view(default_system_) : system);
  if (!system_header_.empty() || !sys.empty()) {
    p.push_back({turn_open_, ""});
    p.push_back({-1, "system"});
    p.push_back({header_close_, ""});
    p.push_back({-1, "\n\n" + system_header_ + std::string(sys)});
    p.push_back({turn_close_, ""});
  }
  p.push_back({turn_open_, ""});
  p.push_back({-1, "user"});
  p.push_back({header_close_, ""});
  p.push_back({-1, "\n\n"});
}

void ChatTemplate::add_suffix(Pieces& p, std::string_view user_tail) const {
  p.push_back({-1, std::string(user_tail)});
  if (format_ == ChatFormat::Plain) {
    p.push_back({-1, std::string(kPlainAnswer)});
    return;
  }
  if (format_ == ChatFormat::Gemma) {
    p.push_back({turn_close_, ""});
    p.push_back({-1, "\n"});
    p.push_back({turn_open_, ""});
    p.push_back({-1, "model\n"});
    return;
  }
  p.push_back({turn_close_, ""});
  if (format_ == ChatFormat::ChatMl) {
    p.push_back({-1, "\n"});
    p.push_back({turn_open_, ""});
    p.push_back({-1, "assistant\n"});
    return;
  }
  p.push_back({turn_open_, ""});
  p.push_back({-1, "assistant"});
  p.push_back({header_close_, ""});
  p.push_back({-1, "\n\n"});
}

void ChatTemplate::add_next_turn(Pieces& p, std::string_view answer, std::string_view user) const {
  p.push_back({-1, std::string(trim_messages_ ? trim(answer) : answer)});
  if (format_ == ChatFormat::Plain) {
    p.push_back({-1, "\n\n"});
    add_suffix(p, user);
    return;
  }
  p.push_back({turn_close_, ""});
  if (format_ == ChatFormat::Gemma) {
    p.push_back({-1, "\n"});
    p.push_back({turn_open_, ""});
    p.push_back({-1, "user\n"});
  } else if (format_ == ChatFormat::ChatMl) {
    p.push_back({-1, "\n"});
    p.push_back({turn_open_, ""});
    p.push_back({-1, "user\n"});
  } else {
    p.push_back({turn_open_, ""});
    p.push_back({-1, "user"});
    p.push_back({header_close_, ""});
    p.push_back({-1, "\n\n"});
  }
  add_suffix(p, trim_messages_ ? trim(user) : user);
}

std::vector<int32_t> ChatTemplate::encode(const Pieces& p) const {
  std::vector<int32_t> out;
  std::string text;  // pending text between two control tokens
  auto flush = [&] {
    std::vector<int32_t> ids = tok_->encode(text, false);
    out.insert(out.end(), ids.begin(), ids.end());
    text.clear();
  };
  for (const Piece& piece : p) {
    if (piece.control < 0) {
      text += piece.text;
      continue;
    }
    flush();
    out.push_back(piece.control);
  }
  flush();
  return out;
}

std::vector<int32_t> ChatTemplate::prefix(std::string_view system) const {
  Pieces p;
  add_prefix(p, system);
  return encode(p);
}

std::vector<int32_t> ChatTemplate::encode_document(std::string_view text) const {
  return tok_->encode(text, false);
}

std::vector<int32_t> ChatTemplate::suffix(std::string_view user_tail) const {
  Pieces p;
  add_suffix(p, user_tail);
  return encode(p);
}

std::vector<int32_t> ChatTemplate::next_turn(std::string_view answer, std::string_view user) const {
  Pieces p;
  add_next_turn(p, answer, user);
  return encode(p);
}

std::vector<int32_t> ChatTemplate::chat(std::string_view system, std::string_view user) const {
  Pieces p;
  add_prefix(p, system);
  add_suffix(p, trim_messages_ ? trim(user) : user);
  return encode(p);
}

std::string ChatTemplate::render(std::string_view system, std::string_view user,
                                 std::span<const std::pair<std::string, std::string>> turns) const {
  Pieces p;
  add_prefix(p, system);
  add_suffix(p, trim_messages_ ? trim(user) : user);
  for (const auto& [answer, next] : turns) add_next_turn(p, answer, next);
  std::string out;
  for (const Piece& piece : p)
    out += piece.control >= 0 ? tok_->token_text(piece.control) : piece.text;
  return out;
}

std::vector<int32_t> ChatTemplate::stop_tokens() const {
  std::vector<int32_t> ids;
  if (turn_close_ >= 0) ids.push_back(turn_close_);
  if (format_ == ChatFormat::Plain)
    for (std::string_view nl : {"\n", "\n\n"})
      if (const std::vector<int32_t> one = tok_->encode(nl, false); one.size() == 1)
        ids.push_back(one[0]);
  if (tok_->eos() >= 0) ids.push_back(tok_->eos());
  if (tok_->eot() >= 0) ids.push_back(tok_->eot());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace kvzip::model
