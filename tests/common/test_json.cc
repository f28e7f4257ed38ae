// common/json.h: the shared JSON reader and string quoting. Quoting must round-trip through the
// parser for any byte string the CLI or eval writes (answers, questions with control characters),
// and the parser must refuse the malformed inputs a questions or SQuAD file can contain.
#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "common/error.h"
#include "common/json.h"

using namespace kvzip;

TEST_CASE("json_quote output parses back to the same string for random text", "[common]") {
  std::mt19937 rng(7);
  // ASCII incl. every control character, quotes and backslashes, plus multi-byte UTF-8 pieces.
  const std::string pieces[] = {"\"", "\\", "\n", "\r", "\t", "\x01", "\x1f", "/", "a", " ",
                                "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "{", "}", "u"};
  for (int trial = 0; trial < 200; ++trial) {
    std::string s;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) s += pieces[rng() % std::size(pieces)];
    const std::string quoted = json_quote(s);
    for (const char c : quoted) REQUIRE(static_cast<unsigned char>(c) >= 0x20);  // no raw controls
    const JsonValue v = parse_json(quoted, "quoted");
    REQUIRE(v.type == JsonType::String);
    REQUIRE(v.string == s);
  }
}

TEST_CASE("json_quote escapes exactly the characters JSON requires", "[common]") {
  CHECK(json_quote("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(json_quote("x\ny\tz\r") == "\"x\\ny\\tz\\r\"");
  CHECK(json_quote(std::string("\x00\x07", 2)) == "\"\\u0000\\u0007\"");
  CHECK(json_quote("caf\xc3\xa9") == "\"caf\xc3\xa9\"");
}

TEST_CASE("parse_json reads a questions-file object and keeps member order", "[common]") {
  const JsonValue v =
      parse_json(R"( {"id": 3, "question": "Who \u00e9crit?", "tags": [true, null, -1.5e2]} )", "q");
  REQUIRE(v.type == JsonType::Object);
  REQUIRE(v.object.size() == 3);
  CHECK(v.object[0].first == "id");
  const JsonValue* q = v.find("question");
  REQUIRE(q);
  CHECK(q->string == "Who \xc3\xa9" "crit?");
  const JsonValue* tags = v.find("tags");
  REQUIRE(tags);
  REQUIRE(tags->array.size() == 3);
  CHECK(tags->array[0].boolean);
  CHECK(tags->array[1].type == JsonType::Null);
  CHECK(tags->array[2].number == -150.0);
  CHECK(v.find("missing") == nullptr);
}

TEST_CASE("parse_json refuses malformed input with the position", "[common]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(parse_json("{\"a\": 1,}", "f.json"), Contains("f.json"));
  CHECK_THROWS_AS(parse_json("{\"a\": 1} x", "f"), Error);
  CHECK_THROWS_AS(parse_json("[1, 2", "f"), Error);
  CHECK_THROWS_AS(parse_json("\"tab\there\"", "f"), Error);  // raw control character
  CHECK_THROWS_AS(parse_json("\"\\ud800\"", "f"), Error);    // lone surrogate
  CHECK_THROWS_AS(parse_json("", "f"), Error);
  const std::string deep(kJsonMaxDepth + 1, '[');
  CHECK_THROWS_WITH(parse_json(deep, "f"), Contains("nesting"));
}
