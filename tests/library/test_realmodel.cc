// The library on the real model ($KVZIP_MODEL): three paragraphs of the Normans article
// compressed at ratio 0.5 into one folder; a question of the second paragraph retrieves it
// first, and the answer from the retrieved composition names the duke that paragraph names.
#include <catch2/catch.hpp>

#include <filesystem>

#include "eval/squad.h"
#include "library/library.h"
#include "loader/loader.h"
#include "tests/format/fixtures.h"
#include "tests/serve/support.h"
#include "tests/support/real_model.h"
#include "tests/support/source_path.h"

using namespace kvzip;

TEST_CASE("the Normans paragraphs as a library: the question's paragraph first, the answer from it",
          "[library][realmodel]") {
  KVZIP_REAL_MODEL_OR_SKIP(model);
  eval::SquadOptions so;
  so.unit = eval::DocumentUnit::Paragraph;
  const std::string path = kvzip::test::source_path("examples/normans.json");
  const std::vector<eval::Document> docs = eval::read_squad(path, so);
  REQUIRE(docs.size() >= 3);
  format::testing::TempDir d;
  for (int i = 0; i < 3; ++i)
    test::compress_document(*model, docs[i].text, d.path("p" + std::to_string(i) + ".kvz"));
  library::Index index(d.dir());
  CHECK(index.refresh().indexed == 3);
  const std::string q = "Who was the duke in the battle of Hastings?";
  const library::Selection sel = library::retrieve(index, *model, q, 2, 24);
  REQUIRE(sel.sources.size() == 2);
  CHECK(sel.sources[0].id == "p1");
  std::vector<std::string> paths;
  for (const auto& h : sel.sources) paths.push_back(h.path);
  loader::SessionOptions lo;
  lo.threads = 2;
  loader::QuerySession session(*model, paths, lo);
  model::GenerateParams gp;
  gp.max_tokens = 24;
  gp.stop_tokens = model->chat().stop_tokens();
  CHECK(session.ask(q, gp).text.find("William") != std::string::npos);
}
