// Two processes on one folder's index: the built `kvzip` binary, run as a child, refreshes the
// index while this process searches it, and searches (refreshing too, or only reading) while this
// process writes it. Every child succeeds, no "database is locked" (or any other SQLite error)
// reaches the user, and every search ranks the same cache first. A child that finds the index
// locked by this process's write transaction waits for it (busy_timeout) and then succeeds.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "format/format.h"
#include "library/library.h"
#include "tests/format/fixtures.h"
#include "tests/support/run_cli.h"

using namespace kvzip;
using namespace kvzip::testing;
using format::testing::TempDir;

namespace {

void write_doc(const TempDir& d, const std::string& id, const std::string& text, uint64_t seed) {
  format::testing::SyntheticSpec sp;
  sp.seed = seed;
  sp.document = 12;
  format::CacheContents c = format::testing::synthetic(sp);
  c.header.document_text = text;
  format::WriteOptions o;
  o.force = true;
  format::write_cache_file(c, d.path(id + ".kvz"), o);
}

// Three caches of which "normans" alone holds the words searched for.
void three_docs(const TempDir& d) {
  write_doc(d, "normans", "The Normans gave their name to Normandy, a region in France.", 1);
  write_doc(d, "river", "The river town kept its clocks an hour behind the capital.", 2);
  write_doc(d, "orchard", "Nobody remembered who planted the orchard; the pears were sour.", 3);
}

std::string extra_text(int i) {
  std::string t = "filler text number ";
  return t.append(std::to_string(i));
}

// A child's failure, or "" when it exited 0 with nothing about a lock or SQLite on stderr.
std::string child_problem(const CliResult& r) {
  std::string p;
  if (r.exit_code != 0 || r.hung || r.signal) p.append("exit ").append(std::to_string(r.exit_code));
  for (const char* word : {"locked", "busy", "SQLite", "sqlite"})
    if (r.err.find(word) != std::string::npos) p.append(" stderr names ").append(word);
  if (!p.empty()) p.append(": ").append(r.err);
  return p;
}

// The first source of `kvzip search --json`'s answer ("" for none or unparsable output).
std::string first_source(const CliResult& r) {
  try {
    const Json j = parse_json(r.out, "kvzip search");
    const Json& s = j.at("sources");
    return s.empty() ? std::string() : s.at(0).at("id").get<std::string>();
  } catch (...) {
    return {};
  }
}

}  // namespace

TEST_CASE("a child process refreshes the index while this process searches it", "[library]") {
  TempDir d;
  three_docs(d);
  { library::Index(d.dir()).refresh(); }
  constexpr int kWrites = 8;
  std::vector<std::string> problems;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < kWrites; ++i) {
      write_doc(d, "extra" + std::to_string(i), extra_text(i), 10 + i);
      const CliResult r = run_kvzip({"index", d.dir(), "-q"});
      if (const std::string p = child_problem(r); !p.empty()) problems.push_back(p);
    }
    done = true;
  });
  int searches = 0, wrong = 0, errors = 0;
  {
    library::Index reader(d.dir());
    while (!done || searches < 20) {
      try {
        const auto hits = reader.search("Normandy Normans", 4);
        wrong += hits.empty() || hits[0].id != "normans";
        ++searches;
      } catch (const std::exception& e) {
        UNSCOPED_INFO(e.what());
        ++errors;
        if (errors > 5) break;
      }
    }
  }
  writer.join();
  for (const std::string& p : problems) UNSCOPED_INFO(p);
  CHECK(problems.empty());
  CHECK(errors == 0);
  CHECK(wrong == 0);
  // Every extra the children indexed is in the index this process reads.
  CHECK(library::Index(d.dir()).count() == 3 + kWrites);
}

TEST_CASE("children search the index while this process writes it", "[library]") {
  TempDir d;
  three_docs(d);
  { library::Index(d.dir()).refresh(); }
  constexpr int kWrites = 6, kBatch = 25;
  std::atomic<bool> done{false};
  std::vector<std::string> problems;
  std::atomic<int> children{0};
  std::thread searcher([&] {
    // Alternately a reader (--no-refresh) and a second writer (search refreshes first).
    while (!done || children < 4) {
      std::vector<std::string> args = {"search", d.dir(), "Normandy Normans", "--json", "-q"};
      if (children % 2) args.push_back("--no-refresh");
      const CliResult r = run_kvzip(args);
      std::string p = child_problem(r);
      if (p.empty() && first_source(r) != "normans") p = "first source not normans: " + r.out;
      if (!p.empty()) problems.push_back(p);
      ++children;
    }
  });
  int writes = 0;
  {
    library::Index w(d.dir());
    // Rounds of kBatch new caches, each refresh one long write transaction that a refreshing
    // child's waits for (or the other way round); rounds go on until several children ran.
    for (; writes < kWrites || (children < 6 && writes < 100); ++writes) {
      for (int j = 0; j < kBatch; ++j) {
        const int n = writes * kBatch + j;
        write_doc(d, "extra" + std::to_string(n), extra_text(n), 10 + n);
      }
      const library::RefreshStats st = w.refresh();
      // A refreshing child may have indexed new caches first: then they are unchanged here.
      CHECK(st.indexed + st.unchanged == st.files);
      CHECK(st.files == 3u + kBatch * (writes + 1u));
    }
    done = true;
    searcher.join();
    CHECK(w.count() == 3u + kBatch * writes);
  }
  for (const std::string& p : problems) UNSCOPED_INFO(p);
  CHECK(problems.empty());
  CHECK(children >= 6);
}

TEST_CASE("a child waits for this process's write transaction instead of failing", "[library]") {
  TempDir d;
  three_docs(d);
  { library::Index(d.dir()).refresh(); }
  write_doc(d, "late", "A late cache about lighthouses.", 9);
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open((d.dir() + "/" + library::kIndexName).c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  CliResult writer, reader;
  std::thread child([&] {
    writer = run_kvzip({"index", d.dir(), "-q"});
    reader = run_kvzip({"search", d.dir(), "lighthouses", "--json", "-q", "--no-refresh"});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  REQUIRE(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  child.join();
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(child_problem(writer).empty());
  CHECK(child_problem(reader).empty());
  CHECK(first_source(reader) == "late");
  CHECK(waited >= 0.4);
  CHECK(library::Index(d.dir()).count() == 4);
}
