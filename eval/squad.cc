// SQuAD reader (see squad.h): parses the JSON tree, then walks it checking every field it uses,
// naming the JSON path of the first problem. Fields the evaluation does not use are ignored.
#include "eval/squad.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/json.h"
#include "tokenizer/tokenizer.h"

namespace kvzip::eval {
namespace {

struct Walker {
  const std::string& source;

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw Error(Errc::invalid_argument,
                source + ": " + path + ": " + what +
                    " (expected SQuAD JSON: {\"data\":[{\"title\",\"paragraphs\":"
                    "[{\"context\",\"qas\":[{\"question\",\"id\",\"answers\":"
                    "[{\"text\"}]}]}]}]})");
  }

  // The member `key` of object `obj`, of type `want`; absent or JSON null: nullptr when
  // optional, else an error naming the path.
  const Json* field(const Json& obj, const std::string& path, const char* key, Json::value_t want,
                    bool optional) const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
      if (optional) return nullptr;
      fail(path, std::string("missing field \"") + key + "\"");
    }
    if (it->type() != want)
      fail(path + "." + key, std::string("expected ") + json_type_name(Json(want)) + ", found " +
                                 json_type_name(*it));
    return &*it;
  }
  const Json& member(const Json& obj, const std::string& path, const char* key,
                     Json::value_t want) const {
    return *field(obj, path, key, want, false);
  }
  const Json* optional(const Json& obj, const std::string& path, const char* key,
                       Json::value_t want) const {
    return field(obj, path, key, want, true);
  }

  void require_object(const Json& v, const std::string& path) const {
    if (!v.is_object()) fail(path, std::string("expected an object, found ") + json_type_name(v));
  }

  Question question(const Json& qa, const std::string& path) const {
    require_object(qa, path);
    Question q;
    q.text = member(qa, path, "question", Json::value_t::string).get<std::string>();
    if (q.text.find_first_not_of(" \t\r\n") == std::string::npos)
      fail(path + ".question", "empty question");
    if (const Json* id = optional(qa, path, "id", Json::value_t::string))
      q.id = id->get<std::string>();
    if (const Json* imp = optional(qa, path, "is_impossible", Json::value_t::boolean))
      q.impossible = imp->get<bool>();
    const Json& answers = member(qa, path, "answers", Json::value_t::array);
    for (size_t i = 0; i < answers.size(); ++i) {
      const std::string ap = path + ".answers[" + std::to_string(i) + "]";
      require_object(answers[i], ap);
      q.answers.push_back(member(answers[i], ap, "text", Json::value_t::string).get<std::string>());
    }
    if (!q.impossible && q.answers.empty())
      fail(path + ".answers",
           "an answerable question (is_impossible false or absent) has no answers");
    return q;
  }
};

// Keeps the questions `o` selects; `taken` counts them against o.max_questions.
void add_questions(std::vector<Question>& out, std::vector<Question> qs, const SquadOptions& o,
                   uint64_t& taken) {
  for (Question& q : qs) {
    if (q.impossible && !o.all_questions) continue;
    if (o.max_questions && taken >= o.max_questions) return;
    out.push_back(std::move(q));
    ++taken;
  }
}

}  // namespace

DocumentUnit parse_document_unit(std::string_view name) {
  if (name == "article") return DocumentUnit::Article;
  if (name == "paragraph") return DocumentUnit::Paragraph;
  throw Error(Errc::invalid_argument,
              "unknown document unit '" + std::string(name) + "'; expected article or paragraph");
}

std::vector<Document> parse_squad(std::string_view json, const std::string& source,
                                  const SquadOptions& options) {
  if (!is_valid_utf8(json))
    throw Error(Errc::invalid_argument,
                source + ": the file is not valid UTF-8; convert it to UTF-8 first");
  const Json root = parse_json(json, source);
  const Walker w{source};
  w.require_object(root, "(top level)");
  const Json& data = w.member(root, "(top level)", "data", Json::value_t::array);
  std::vector<Document> docs;
  uint64_t taken = 0;
  for (size_t a = 0; a < data.size(); ++a) {
    const std::string ap = "data[" + std::to_string(a) + "]";
    const Json& art = data[a];
    w.require_object(art, ap);
    std::string title;
    if (const Json* t = w.optional(art, ap, "title", Json::value_t::string))
      title = t->get<std::string>();
    const Json& paras = w.member(art, ap, "paragraphs", Json::value_t::array);
    Document article{title, "", {}};
    for (size_t p = 0; p < paras.size(); ++p) {
      const std::string pp = ap + ".paragraphs[" + std::to_string(p) + "]";
      w.require_object(paras[p], pp);
      const std::string& context =
          w.member(paras[p], pp, "context", Json::value_t::string).get_ref<const std::string&>();
      if (context.find_first_not_of(" \t\r\n") == std::string::npos)
        w.fail(pp + ".context", "empty context");
      const Json& qas = w.member(paras[p], pp, "qas", Json::value_t::array);
      std::vector<Question> qs;
      for (size_t q = 0; q < qas.size(); ++q)
        qs.push_back(w.question(qas[q], pp + ".qas[" + std::to_string(q) + "]"));
      if (options.unit == DocumentUnit::Paragraph) {
        Document d{title + " #" + std::to_string(p + 1), context, {}};
        add_questions(d.questions, std::move(qs), options, taken);
        if (!d.questions.empty()) docs.push_back(std::move(d));
      } else {
        article.text += (article.text.empty() ? "" : "\n\n") + context;
        add_questions(article.questions, std::move(qs), options, taken);
      }
    }
    if (options.unit == DocumentUnit::Article && !article.questions.empty())
      docs.push_back(std::move(article));
  }
  if (docs.empty())
    throw Error(Errc::invalid_argument,
                source + ": no document has a question to evaluate" +
                    (options.all_questions ? std::string()
                                           : " (only answerable questions are used; "
                                             "option all_questions adds the unanswerable ones)"));
  return docs;
}

std::vector<Document> read_squad(const std::string& path, const SquadOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw Error(err == ENOENT ? Errc::not_found : Errc::io,
                "cannot open SQuAD file " + path + ": " + std::strerror(err));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(Errc::io, "cannot read SQuAD file " + path);
  return parse_squad(ss.str(), path, options);
}

}  // namespace kvzip::eval
