// The SQuAD reader on a small inline file (article and paragraph documents, unanswerable
// questions, --max-questions, JSON escapes) and on malformed input: every error names where the
// problem is.
#include <catch2/catch.hpp>

#include <string>

#include "common/error.h"
#include "eval/squad.h"

using namespace kvzip;
using namespace kvzip::eval;
using Catch::Matchers::Contains;

namespace {

const char* kSquad = R"({"version": "v2.0", "data": [
  {"title": "Normans", "paragraphs": [
    {"context": "The Normans were people from Normandy.",
     "qas": [
       {"question": "Who were the Normans?", "id": "q1",
        "answers": [{"text": "people from Normandy", "answer_start": 16},
                    {"text": "people", "answer_start": 16}], "is_impossible": false},
       {"question": "Who gave their name to Normandy?", "id": "q2", "answers": [],
        "plausible_answers": [{"text": "Normans", "answer_start": 4}], "is_impossible": true}]},
    {"context": "Rollo was their first ruler \u2014 caf\u00e9 \"quoted\".",
     "qas": [
       {"question": "Who was the first ruler?", "id": "q3", "answers": [{"text": "Rollo"}]}]}]},
  {"title": "Empty", "paragraphs": [
    {"context": "Nothing to ask here.", "qas": []}]}]})";

Errc code_of(const std::string& json, const SquadOptions& o = {}) {
  try {
    parse_squad(json, "t.json", o);
  } catch (const Error& e) {
    return e.code();
  }
  return Errc::internal;
}

}  // namespace

TEST_CASE("SQuAD articles become one document with their answerable questions", "[eval]") {
  const auto docs = parse_squad(kSquad, "t.json", {});
  REQUIRE(docs.size() == 1);  // the article without questions is dropped
  CHECK(docs[0].title == "Normans");
  CHECK(docs[0].text ==
        "The Normans were people from Normandy.\n\n"
        "Rollo was their first ruler \xE2\x80\x94 caf\xC3\xA9 \"quoted\".");
  REQUIRE(docs[0].questions.size() == 2);
  CHECK(docs[0].questions[0].id == "q1");
  CHECK(docs[0].questions[0].answers == std::vector<std::string>{"people from Normandy", "people"});
  CHECK(docs[0].questions[1].text == "Who was the first ruler?");
  CHECK_FALSE(docs[0].questions[1].impossible);  // no is_impossible field: answerable (v1.1)
}

TEST_CASE("SQuAD paragraphs become documents of their own; all-questions adds unanswerable ones",
          "[eval]") {
  SquadOptions o;
  o.unit = DocumentUnit::Paragraph;
  o.all_questions = true;
  const auto docs = parse_squad(kSquad, "t.json", o);
  REQUIRE(docs.size() == 2);
  CHECK(docs[0].title == "Normans #1");
  CHECK(docs[0].text == "The Normans were people from Normandy.");
  REQUIRE(docs[0].questions.size() == 2);
  CHECK(docs[0].questions[1].impossible);
  CHECK(docs[0].questions[1].answers.empty());
  CHECK(docs[1].title == "Normans #2");
  CHECK(docs[1].questions.size() == 1);
}

TEST_CASE("max-questions keeps the first questions of the file and drops emptied documents",
          "[eval]") {
  SquadOptions o;
  o.unit = DocumentUnit::Paragraph;
  o.max_questions = 1;
  const auto docs = parse_squad(kSquad, "t.json", o);
  REQUIRE(docs.size() == 1);
  REQUIRE(docs[0].questions.size() == 1);
  CHECK(docs[0].questions[0].id == "q1");
}

TEST_CASE("document units parse from their names", "[eval]") {
  CHECK(parse_document_unit("article") == DocumentUnit::Article);
  CHECK(parse_document_unit("paragraph") == DocumentUnit::Paragraph);
  CHECK_THROWS_WITH(parse_document_unit("page"), Contains("article or paragraph"));
}

TEST_CASE("malformed JSON is refused with the line and column", "[eval]") {
  CHECK_THROWS_WITH(parse_squad("{\"data\": [", "t.json", {}),
                    Contains("t.json: invalid JSON") && Contains("line 1, column 11"));
  CHECK_THROWS_WITH(parse_squad("{\"data\": [],}", "t.json", {}),
                    Contains("column 13") && Contains("object key"));
  CHECK_THROWS_WITH(parse_squad("{\"data\":\n [1 2]}", "t.json", {}), Contains("line 2, column 5"));
  CHECK_THROWS_WITH(parse_squad("{\"data\": []} x", "t.json", {}),
                    Contains("expected end of input"));
  CHECK_THROWS_WITH(parse_squad("{\"a\": \"x\ty\"}", "t.json", {}), Contains("control character"));
  CHECK_THROWS_WITH(parse_squad("{\"a\": \"\\ud800\"}", "t.json", {}), Contains("surrogate"));
  CHECK_THROWS_WITH(parse_squad("{\"a\": \"\\q\"}", "t.json", {}), Contains("after backslash"));
  CHECK_THROWS_WITH(parse_squad("{\"a\": 01}", "t.json", {}), Contains("column 8"));
  CHECK_THROWS_WITH(parse_squad("{\"a\": tru}", "t.json", {}), Contains("invalid literal"));
  CHECK_THROWS_WITH(parse_squad("{\"a\": \"\xFF\"}", "t.json", {}), Contains("not valid UTF-8"));
  CHECK_THROWS_WITH(parse_squad(std::string(300, '['), "t.json", {}), Contains("nesting deeper"));
  CHECK(code_of("") == Errc::invalid_argument);
}

TEST_CASE("mis-shaped SQuAD files are refused naming the JSON path", "[eval]") {
  CHECK_THROWS_WITH(parse_squad("[]", "t.json", {}),
                    Contains("expected an object, found an array"));
  CHECK_THROWS_WITH(parse_squad("{\"version\": 1}", "t.json", {}),
                    Contains("missing field \"data\""));
  CHECK_THROWS_WITH(
      parse_squad(R"({"data":[{"title":"T","paragraphs":[{"context":"c","qas":[
                   {"question":"q?","answers":"Rollo"}]}]}]})",
                  "t.json", {}),
      Contains("data[0].paragraphs[0].qas[0].answers: expected an array, found a string"));
  CHECK_THROWS_WITH(parse_squad(R"({"data":[{"title":"T","paragraphs":[{"context":"c","qas":[
                   {"question":"q?","answers":[]}]}]}]})",
                                "t.json", {}),
                    Contains("has no answers"));
  CHECK_THROWS_WITH(parse_squad(R"({"data":[{"paragraphs":[{"qas":[]}]}]})", "t.json", {}),
                    Contains("data[0].paragraphs[0]: missing field \"context\""));
  CHECK_THROWS_WITH(
      parse_squad(R"({"data":[{"paragraphs":[{"context":" ","qas":[]}]}]})", "t.json", {}),
      Contains("empty context"));
  CHECK_THROWS_WITH(
      parse_squad(
          R"({"data":[{"paragraphs":[{"context":"c","qas":[{"question":"q","answers":[{"text":1}]}]}]}]})",
          "t.json", {}),
      Contains("answers[0].text: expected a string, found a number"));
}

TEST_CASE("a SQuAD file without any question to ask is refused", "[eval]") {
  const char* only_impossible = R"({"data":[{"title":"T","paragraphs":[{"context":"c","qas":[
      {"question":"q?","answers":[],"is_impossible":true}]}]}]})";
  CHECK_THROWS_WITH(parse_squad(only_impossible, "t.json", {}), Contains("option all_questions"));
  SquadOptions all;
  all.all_questions = true;
  CHECK(parse_squad(only_impossible, "t.json", all).size() == 1);
}

TEST_CASE("a missing SQuAD file is reported as not found", "[eval]") {
  try {
    read_squad("/nonexistent/squad.json", {});
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::not_found);
    CHECK_THAT(e.what(), Contains("/nonexistent/squad.json"));
  }
}
