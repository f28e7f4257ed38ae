// serve/openai: chat-completion requests parsed field by field (hostile bodies give ApiError with
// a 4xx status and the offending field, never a crash), and stop strings cut across token
// boundaries with streamed text held back only while it may still become a stop string.
#include <catch2/catch.hpp>

#include <string>

#include "serve/openai.h"

using namespace kvzip::serve;

namespace {

int status_of(const std::string& body) {
  try {
    parse_chat_request(body, ChatLimits{});
    return 200;
  } catch (const ApiError& e) {
    return e.status;
  }
}

const std::string kMsg = R"("messages": [{"role": "user", "content": "Who?"}])";

}  // namespace

TEST_CASE("a chat request is parsed with OpenAI's defaults and fields", "[serve]") {
  ChatRequest r = parse_chat_request(
      R"({"model": "doc", "messages": [{"role": "system", "content": "be brief"},
          {"role": "user", "content": [{"type": "text", "text": "Who "}, {"type": "text", "text": "won?"}]}],
          "max_tokens": 7, "temperature": 0, "top_p": 0.5, "seed": -3, "stop": ["\n", "END"],
          "stream": true, "stream_options": {"include_usage": true}, "user": "x", "n": 1})",
      ChatLimits{});
  CHECK(r.cache == "doc");
  CHECK(r.question == "Who won?");
  CHECK(r.max_tokens == 7);
  CHECK(r.temperature == 0.0f);
  CHECK(r.top_p == 0.5f);
  CHECK(r.seeded);
  CHECK(r.seed == uint64_t(int64_t(-3)));
  CHECK(r.stop == std::vector<std::string>{"\n", "END"});
  CHECK(r.stream);
  CHECK(r.include_usage);
  ChatRequest d =
      parse_chat_request("{\"model\": \"m\", \"cache\": \"c\", " + kMsg + "}", ChatLimits{});
  CHECK(d.cache == "c");  // the extra field names the cache
  CHECK(d.max_tokens == ChatLimits{}.default_max_tokens);
  CHECK(d.temperature == 1.0f);
  CHECK_FALSE(d.stream);
}

TEST_CASE("a conversation is parsed into earlier turns and the question", "[serve]") {
  ChatRequest r = parse_chat_request(
      R"({"model": "doc", "messages": [{"role": "system", "content": "be brief"},
          {"role": "user", "content": "Who?"}, {"role": "assistant", "content": "Rollo."},
          {"role": "developer", "content": "skipped"},
          {"role": "user", "content": "When?"}, {"role": "assistant", "content": "911."},
          {"role": "user", "content": "Where?"}]})",
      ChatLimits{});
  CHECK(r.question == "Where?");
  REQUIRE(r.history.size() == 2);
  CHECK(r.history[0] == std::pair<std::string, std::string>{"Who?", "Rollo."});
  CHECK(r.history[1] == std::pair<std::string, std::string>{"When?", "911."});
  CHECK(parse_chat_request("{\"model\": \"d\", " + kMsg + "}", ChatLimits{}).history.empty());
  // Turns out of order, and a conversation over the byte cap.
  const std::string m = "\"model\": \"doc\", ";
  CHECK(
      status_of(
          "{" + m +
          R"("messages": [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]})") ==
      400);
  CHECK(
      status_of(
          "{" + m +
          R"("messages": [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}]})") ==
      400);
  CHECK(status_of(
            "{" + m +
            R"("messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "a"},
                                            {"role": "assistant", "content": "b"}, {"role": "user", "content": "y"}]})") ==
        400);
  const std::string half(40 * 1024, 'x');
  CHECK(status_of("{" + m + "\"messages\": [{\"role\": \"user\", \"content\": \"" + half +
                  "\"}, {\"role\": \"assistant\", \"content\": \"a\"}, {\"role\": \"user\", "
                  "\"content\": \"" +
                  half + "\"}]}") == 413);
}

TEST_CASE("hostile chat requests get 4xx statuses", "[serve]") {
  const std::string m = "\"model\": \"doc\", ";
  CHECK(status_of("") == 400);
  CHECK(status_of("{") == 400);
  CHECK(status_of("[]") == 400);
  CHECK(status_of("\"x\"") == 400);
  CHECK(status_of("{\"messages\": []}") == 400);            // no model
  CHECK(status_of("{\"model\": 3, " + kMsg + "}") == 400);  // model of the wrong type
  CHECK(status_of("{" + m + "\"messages\": \"hi\"}") == 400);
  CHECK(status_of("{" + m + "\"messages\": [1]}") == 400);
  CHECK(status_of("{" + m + "\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}]}") ==
        400);
  CHECK(status_of("{" + m + "\"messages\": [{\"role\": \"user\", \"content\": \"  \"}]}") == 400);
  CHECK(status_of(
            "{" + m +
            "\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}") ==
        400);
  for (const char* bad : {"\"max_tokens\": -1",
                          "\"max_tokens\": 0",
                          "\"max_tokens\": 1.5",
                          "\"max_tokens\": \"9\"",
                          "\"max_tokens\": 99999999999999999999",
                          "\"max_tokens\": 1e400",
                          "\"max_tokens\": 4097",
                          "\"temperature\": -0.1",
                          "\"temperature\": 2.5",
                          "\"temperature\": \"hot\"",
                          "\"top_p\": 0",
                          "\"top_p\": 1.1",
                          "\"seed\": 1.5",
                          "\"stop\": 3",
                          "\"stop\": [\"a\", 1]",
                          "\"stop\": [\"a\",\"b\",\"c\",\"d\",\"e\"]",
                          "\"stop\": \"\"",
                          "\"stream\": \"yes\"",
                          "\"n\": 2",
                          "\"presence_penalty\": 1",
                          "\"logprobs\": true",
                          "\"tools\": []",
                          "\"stream_options\": 1"}) {
    INFO(bad);
    CHECK(status_of("{" + m + kMsg + ", " + bad + "}") == 400);
  }
  CHECK(status_of("{" + m + kMsg + ", \"unknown_field\": {\"deep\": [1, 2]}}") == 200);
  const std::string big(70 * 1024, 'x');
  CHECK(status_of("{" + m + "\"messages\": [{\"role\": \"user\", \"content\": \"" + big +
                  "\"}]}") == 413);
  std::string deep = "{" + m + kMsg + ", \"x\": ";
  for (int i = 0; i < 100000; ++i) deep += "[";
  CHECK(status_of(deep) == 400);  // nesting that never closes: a parse error, no crash
}

TEST_CASE("stop strings are cut across token boundaries and held back while streaming", "[serve]") {
  StopText t({"END", "\n\n"});
  CHECK_FALSE(t.add("Hello E"));
  CHECK(t.safe_length(false) == 6);  // "E" may start "END"
  CHECK_FALSE(t.add("N"));
  CHECK(t.safe_length(false) == 6);
  CHECK_FALSE(t.add("x"));
  CHECK(t.safe_length(false) == t.text().size());  // "ENx" is not a stop string
  CHECK_FALSE(t.add(" and\n"));
  CHECK(t.safe_length(false) == t.text().size() - 1);  // the "\n" may start "\n\n"
  CHECK(t.add("\nmore"));                              // "\n\n" straddles the two pieces
  CHECK(t.text() == "Hello ENx and");
  CHECK(t.safe_length(false) == t.text().size());
  StopText none({});
  CHECK_FALSE(none.add("abc"));
  CHECK(none.safe_length(false) == 3);
}

TEST_CASE("an error body is OpenAI's error object", "[serve]") {
  const ApiError e(429, "rate_limit_error", "queue_full", "slow down", "", 1);
  const auto j = error_body(e);
  CHECK(j["error"]["message"] == "slow down");
  CHECK(j["error"]["type"] == "rate_limit_error");
  CHECK(j["error"]["code"] == "queue_full");
  CHECK(j["error"]["param"].is_null());
}
