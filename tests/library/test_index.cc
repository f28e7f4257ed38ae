// The library index (library/library.h) over synthetic .kvz files (tests/format/fixtures.h) with
// document texts of our own: BM25 ranking, re-indexing of a replaced file, deleted and corrupt
// caches never returned, other models' caches filtered out, hostile questions, readers and a
// writer on one index at once, and recovery from a corrupt or newer index file.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "library/library.h"
#include "tests/format/fixtures.h"
#include "tests/support/thrown.h"

using namespace kvzip;
using format::testing::TempDir;

namespace {

ModelFingerprint model_a() {
  ModelFingerprint m;
  m.arch = "llama";
  m.tokenizer_hash = 11;
  m.weights_hash = 22;
  return m;
}

ModelFingerprint model_b() {
  ModelFingerprint m = model_a();
  m.weights_hash = 23;
  return m;
}

void write_doc(const TempDir& d, const std::string& id, const std::string& text,
               const ModelFingerprint& m = model_a(), uint64_t seed = 1) {
  format::testing::SyntheticSpec sp;
  sp.seed = seed;
  sp.document = 12;
  format::CacheContents c = format::testing::synthetic(sp);
  c.header.document_text = text;
  c.header.model = m;
  format::WriteOptions o;
  o.force = true;
  format::write_cache_file(c, d.path(id + ".kvz"), o);
}

std::vector<std::string> ids(const std::vector<library::Hit>& hits) {
  std::vector<std::string> out;
  for (const auto& h : hits) out.push_back(h.id);
  return out;
}

const char* kNormans =
    "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy.";
const char* kRiver = "The river town kept its clocks an hour behind the capital, out of spite.";
const char* kOrchard =
    "Nobody remembered who planted the orchard, but everybody knew the pears were sour.";

void three_docs(const TempDir& d) {
  write_doc(d, "normans", kNormans);
  write_doc(d, "river", kRiver);
  write_doc(d, "orchard", kOrchard);
}

}  // namespace

TEST_CASE("fts_query quotes every word and ORs them", "[library]") {
  CHECK(library::fts_query("Who planted the orchard?") ==
        "\"Who\" OR \"planted\" OR \"the\" OR \"orchard\"");
  CHECK(library::fts_query("\"*\" NEAR( ) AND (") == "\"NEAR\" OR \"AND\"");
  CHECK(library::fts_query("  ?! ").empty());
  CHECK(library::fts_query("caf\xc3\xa9 \xff\xfe x") == "\"caf\xc3\xa9\" OR \"x\"");
}

TEST_CASE("the document holding a rare word ranks first", "[library]") {
  TempDir d;
  three_docs(d);
  library::Index index(d.dir());
  const library::RefreshStats st = index.refresh();
  CHECK(st.files == 3);
  CHECK(st.indexed == 3);
  const ModelFingerprint m = model_a();
  auto hits = index.search("Which pears were sour?", 4, &m);
  REQUIRE(!hits.empty());
  CHECK(hits[0].id == "orchard");
  CHECK(hits[0].score > 0);
  CHECK(hits[0].path == d.path("orchard.kvz"));
  hits = index.search("What gave its name to Normandy?", 4, &m);
  REQUIRE(!hits.empty());
  CHECK(hits[0].id == "normans");
  for (size_t i = 1; i < hits.size(); ++i) CHECK(hits[i - 1].score >= hits[i].score);
  CHECK(index.search("Normandy", 0, &m).empty());
  // A second refresh reads nothing again.
  const library::RefreshStats again = index.refresh();
  CHECK(again.unchanged == 3);
  CHECK(again.indexed == 0);
}

TEST_CASE("a replaced cache is indexed again; a deleted one is never returned", "[library]") {
  TempDir d;
  three_docs(d);
  library::Index index(d.dir());
  index.refresh();
  write_doc(d, "river", "A lighthouse keeper counted ships in a green notebook.", model_a(), 2);
  // Before the refresh the replaced file's old text is not returned either.
  CHECK(ids(index.search("clocks capital spite", 4)).empty());
  const library::RefreshStats st = index.refresh();
  CHECK(st.indexed == 1);
  CHECK(st.unchanged == 2);
  CHECK(ids(index.search("lighthouse notebook", 4)) == std::vector<std::string>{"river"});
  CHECK(ids(index.search("clocks capital spite", 4)).empty());

  std::filesystem::remove(d.path("orchard.kvz"));
  CHECK(ids(index.search("orchard pears", 4)).empty());  // gone before any refresh
  CHECK(index.refresh().removed == 1);
  CHECK(index.count() == 2);
  CHECK(index.update("river"));
  std::filesystem::remove(d.path("river.kvz"));
  CHECK_FALSE(index.update("river"));
  CHECK(index.count() == 1);
}

TEST_CASE("a corrupt cache is skipped with a warning", "[library]") {
  TempDir d;
  three_docs(d);
  auto bytes = format::testing::read_bytes(d.path("orchard.kvz"));
  bytes.resize(bytes.size() / 2);
  format::testing::write_bytes(d.path("orchard.kvz"), bytes);
  format::testing::write_bytes(d.path("junk.kvz"),
                               {'n', 'o', 't', ' ', 'a', ' ', 'c', 'a', 'c', 'h', 'e'});
  format::testing::write_bytes(d.path("bad id!.kvz"), {'x'});  // not a cache id: not looked at
  std::vector<std::string> warnings;
  library::IndexOptions o;
  o.warn = [&](const std::string& w) { warnings.push_back(w); };
  library::Index index(d.dir(), o);
  const library::RefreshStats st = index.refresh();
  CHECK(st.files == 4);
  CHECK(st.indexed == 2);
  CHECK(st.skipped == 2);
  REQUIRE(warnings.size() == 2);
  CHECK(warnings[0].find("junk") != std::string::npos);
  CHECK(warnings[1].find("orchard") != std::string::npos);
  CHECK(ids(index.search("orchard pears sour", 4)).empty());
  CHECK(index.count() == 2);
}

TEST_CASE("hostile questions never make an index error", "[library]") {
  TempDir d;
  three_docs(d);
  library::Index index(d.dir());
  index.refresh();
  const std::vector<std::string> hostile = {"\"",
                                            "\"\"\"",
                                            "*",
                                            "orchard*",
                                            "NEAR(orchard pears, 2)",
                                            "orchard AND",
                                            "AND OR NOT",
                                            "((orchard",
                                            "orchard)",
                                            "text:orchard",
                                            "^orchard",
                                            "{text}: orchard",
                                            "\xff\xfe\xfd orchard",
                                            "caf\xc3\xa9 \xe2\x84\xa2 \xf0\x9f\x8d\x90 orchard",
                                            std::string("orch\0ard", 8),
                                            "-orchard +pears",
                                            std::string(5000, 'a'),
                                            "",
                                            "   "};
  for (const std::string& q : hostile) {
    INFO(q);
    std::vector<library::Hit> hits;
    CHECK_NOTHROW(hits = index.search(q, 4));
    if (q.find("orchard") != std::string::npos && q.find('\0') == std::string::npos) {
      REQUIRE(!hits.empty());
      CHECK(hits[0].id == "orchard");
    }
  }
}

TEST_CASE("caches of another model are never mixed in", "[library]") {
  TempDir d;
  write_doc(d, "mine", kOrchard, model_a());
  write_doc(d, "theirs", std::string(kOrchard) + " orchard orchard", model_b());
  library::Index index(d.dir());
  index.refresh();
  const ModelFingerprint a = model_a(), b = model_b();
  CHECK(ids(index.search("orchard", 4, &a)) == std::vector<std::string>{"mine"});
  CHECK(ids(index.search("orchard", 4, &b)) == std::vector<std::string>{"theirs"});
  CHECK(index.count(&a) == 1);
  ModelFingerprint c = model_a();
  c.arch = "qwen2";
  CHECK(index.count(&c) == 0);
  CHECK(index.search("orchard", 4, &c).empty());
}

TEST_CASE("a missing folder, an empty one, a corrupt or newer index file", "[library]") {
  TempDir d;
  CHECK(test::error_from([&] { library::Index(d.path("nope")); }).code() == Errc::not_found);
  library::IndexOptions ro;
  ro.read_only = true;
  CHECK(test::error_from([&] { library::Index(d.dir(), ro); }).code() == Errc::not_found);
  {
    library::Index empty(d.dir());
    CHECK(empty.refresh().files == 0);
    CHECK(empty.search("anything", 4).empty());
  }
  three_docs(d);
  const std::string idx = d.path(library::kIndexName);
  std::vector<std::string> warnings;
  library::IndexOptions o;
  o.warn = [&](const std::string& w) { warnings.push_back(w); };
  SECTION("garbage") {
    std::filesystem::remove(idx + "-wal");
    std::filesystem::remove(idx + "-shm");
    format::testing::write_bytes(idx, std::vector<uint8_t>(8192, 0x5a));
  }
  SECTION("a newer schema") {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(idx.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  library::Index index(d.dir(), o);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("rebuilding") != std::string::npos);
  CHECK(index.refresh().indexed == 3);
  CHECK(ids(index.search("orchard", 4)) == std::vector<std::string>{"orchard"});
}

TEST_CASE("readers search one index while a writer refreshes it", "[library]") {
  TempDir d;
  three_docs(d);
  { library::Index(d.dir()).refresh(); }
  std::atomic<bool> stop{false};
  std::atomic<int> searches{0}, errors{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t)
    readers.emplace_back([&] {
      try {
        library::Index r(d.dir());  // a connection of its own, as another process has
        while (!stop) {
          const auto hits = r.search("Normandy Normans", 4);
          if (hits.empty() || hits[0].id != "normans") ++errors;
          ++searches;
        }
      } catch (...) {
        ++errors;
      }
    });
  library::Index w(d.dir());
  for (int i = 0; i < 20; ++i) {
    write_doc(d, "extra" + std::to_string(i), "filler text number " + std::to_string(i), model_a(),
              10 + i);
    CHECK(w.refresh().indexed == 1);
  }
  while (searches < 20) std::this_thread::yield();
  stop = true;
  for (auto& t : readers) t.join();
  CHECK(errors == 0);
  CHECK(w.count() == 23);
  // Read-only: searches work, writing is refused.
  library::IndexOptions ro;
  ro.read_only = true;
  library::Index r(d.dir(), ro);
  CHECK(ids(r.search("orchard", 1)) == std::vector<std::string>{"orchard"});
  CHECK(test::error_from([&] { r.refresh(); }).code() == Errc::unsupported);
}
