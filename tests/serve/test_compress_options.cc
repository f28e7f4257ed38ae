// POST /v1/caches checks a compression's options with the library's one check
// (compress::check_file_options) before it starts a job: a bad ratio, method or query template is
// a 400 invalid_value in the library's words, and no job and no file follow.
#include <catch2/catch.hpp>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/serve/http_client.h"

using namespace kvzip::test;
using Catch::Matchers::Contains;

TEST_CASE("serve: POST /v1/caches refuses bad compress options in the library's words", "[serve]") {
  ServedModel s("serve_compress_options");
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {{{"id", "r1"}, {"text", "Some text."}, {"ratio", 1.5}}, "ratio 1.500000 is outside (0, 1]"},
      {{{"id", "r2"}, {"text", "Some text."}, {"ratio", 0}}, "ratio 0.000000 is outside (0, 1]"},
      {{{"id", "m1"}, {"text", "Some text."}, {"method", "nope"}},
       "unknown compression method 'nope'"},
      {{{"id", "q1"}, {"text", "Some text."}, {"query_template", "Q:"}},
       "the query template must contain {question}"},
  };
  for (const auto& [body, words] : cases) {
    INFO(body.dump());
    const std::string r = http(s.port, request("POST", "/v1/caches", body.dump()));
    CHECK(status_of(r) == 400);
    CHECK_THAT(r, Contains("invalid_value") && Contains(words));
    CHECK_FALSE(std::filesystem::exists(s.caches + "/" + body["id"].get<std::string>() + ".kvz"));
  }
  const nlohmann::json good = {{"id", "g1"}, {"text", "Some text."}, {"ratio", 1.0}};
  CHECK(status_of(http(s.port, request("POST", "/v1/caches", good.dump()))) == 202);
}
