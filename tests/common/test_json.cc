// common/json.h: nlohmann/json behind kvzip's rules. Quoting must round-trip through the parser for
// any string the CLI, eval or the server writes (control characters, multi-byte UTF-8) and must not
// throw on bytes that are not UTF-8; the parser must refuse malformed and hostile input with a
// kvzip::Error naming the source.
#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "common/error.h"
#include "common/json.h"

using namespace kvzip;
using Catch::Matchers::Contains;

TEST_CASE("json_quote output parses back to the same string for random text", "[common]") {
  std::mt19937 rng(7);
  // ASCII incl. every control character, quotes and backslashes, plus multi-byte UTF-8 pieces.
  const std::string pieces[] = {"\"",
                                "\\",
                                "\n",
                                "\r",
                                "\t",
                                "\x01",
                                "\x1f",
                                "/",
                                "a",
                                " ",
                                "\xc3\xa9",
                                "\xe2\x82\xac",
                                "\xf0\x9f\x98\x80",
                                "{",
                                "}",
                                "u"};
  for (int trial = 0; trial < 200; ++trial) {
    std::string s;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) s += pieces[rng() % std::size(pieces)];
    const std::string quoted = json_quote(s);
    for (const char c : quoted) REQUIRE(static_cast<unsigned char>(c) >= 0x20);  // no raw controls
    const Json v = parse_json(quoted, "quoted");
    REQUIRE(v.is_string());
    REQUIRE(v.get<std::string>() == s);
  }
}

TEST_CASE("json_quote escapes what JSON requires and replaces invalid UTF-8", "[common]") {
  CHECK(json_quote("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(json_quote("x\ny\tz\r") == "\"x\\ny\\tz\\r\"");
  CHECK(json_quote(std::string("\x00\x07", 2)) == "\"\\u0000\\u0007\"");
  CHECK(json_quote("caf\xc3\xa9") == "\"caf\xc3\xa9\"");
  // A lone continuation byte and a truncated sequence: U+FFFD, never an exception.
  CHECK(json_quote("a\x80z") == "\"a\xef\xbf\xbdz\"");
  CHECK_NOTHROW(json_dump(Json{{"answer", std::string("\xe2\x82")}}));
}

TEST_CASE("parse_json reads a questions-file object", "[common]") {
  const Json v = parse_json(
      R"( {"id": 3, "question": "Who \u00e9crit?", "tags": [true, null, -1.5e2]} )", "q");
  REQUIRE(v.is_object());
  CHECK(v.size() == 3);
  CHECK(v["question"] ==
        "Who \xc3\xa9"
        "crit?");
  const Json& tags = v["tags"];
  REQUIRE(tags.size() == 3);
  CHECK(tags[0] == true);
  CHECK(tags[1].is_null());
  CHECK(tags[2].get<double>() == -150.0);
  CHECK_FALSE(v.contains("missing"));
  CHECK(std::string(json_type_name(v)) == "an object");
  CHECK(std::string(json_type_name(tags[2])) == "a number");
  CHECK(std::string(json_type_name(v["id"])) == "a number");
}

TEST_CASE("parse_json refuses malformed input naming the source", "[common]") {
  CHECK_THROWS_WITH(parse_json("{\"a\": 1,}", "f.json"),
                    Contains("f.json") && Contains("invalid JSON"));
  CHECK_THROWS_AS(parse_json("{\"a\": 1} x", "f"), Error);
  CHECK_THROWS_AS(parse_json("[1, 2", "f"), Error);
  CHECK_THROWS_AS(parse_json("\"tab\there\"", "f"), Error);  // raw control character
  CHECK_THROWS_AS(parse_json("\"\\ud800\"", "f"), Error);    // lone surrogate
  CHECK_THROWS_AS(parse_json("\"\xff\"", "f"), Error);       // invalid UTF-8 in a string
  CHECK_THROWS_AS(parse_json("// c\n1", "f"), Error);        // no comments
  CHECK_THROWS_AS(parse_json("", "f"), Error);
  CHECK_THROWS_AS(parse_json("{\"n\": 1e400}", "f"), Error);  // overflows a double
  try {
    parse_json("[1, 2", "f");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(std::string(e.what()).find("[json.exception") == std::string::npos);
  }
}

TEST_CASE("parse_json limits nesting depth", "[common]") {
  const std::string ok = std::string(kJsonMaxDepth, '[') + std::string(kJsonMaxDepth, ']');
  CHECK_NOTHROW(parse_json(ok, "f"));
  const std::string deep =
      std::string(kJsonMaxDepth + 1, '[') + std::string(kJsonMaxDepth + 1, ']');
  CHECK_THROWS_WITH(parse_json(deep, "f"), Contains("nesting"));
  // A hostile megabyte of brackets fails fast at the limit, without recursion.
  CHECK_THROWS_WITH(parse_json(std::string(1 << 20, '['), "f"), Contains("nesting"));
  std::string nested;
  for (int i = 0; i < 300; ++i) nested += "{\"a\":";
  nested += "1" + std::string(300, '}');
  CHECK_THROWS_WITH(parse_json(nested, "f"), Contains("nesting"));
}
