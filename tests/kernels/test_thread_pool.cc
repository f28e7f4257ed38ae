// ThreadPool: every task runs exactly once, nested runs are serial, exceptions reach the caller.
#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "kernels/thread_pool.h"

using namespace kvzip;

TEST_CASE("thread pool runs every task exactly once across repeated runs", "[kernels]") {
  kernels::ThreadPool pool(3);
  CHECK(pool.size() == 3);
  for (int rep = 0; rep < 50; ++rep) {
    std::vector<std::atomic<int>> hits(37);
    pool.run(hits.size(), [&](size_t i) { hits[i]++; });
    for (auto& h : hits) REQUIRE(h.load() == 1);
  }
}

TEST_CASE("parallel_for covers the range with disjoint pieces", "[kernels]") {
  kernels::ThreadPool pool(2);
  std::vector<std::atomic<int>> hits(1001);
  pool.parallel_for(hits.size(), 10, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) hits[i]++;
  });
  for (auto& h : hits) REQUIRE(h.load() == 1);
}

TEST_CASE("a run issued from inside a task runs serially and completes", "[kernels]") {
  kernels::ThreadPool pool(2);
  std::atomic<int> total{0};
  pool.run(4, [&](size_t) { pool.run(5, [&](size_t) { total++; }); });
  CHECK(total.load() == 20);
}

TEST_CASE("an exception thrown by a task reaches the caller and the pool stays usable",
          "[kernels]") {
  kernels::ThreadPool pool(2);
  CHECK_THROWS_AS(pool.run(10, [](size_t i) {
    if (i == 3) throw std::runtime_error("task 3 failed");
  }), std::runtime_error);
  std::atomic<int> n{0};
  pool.run(8, [&](size_t) { n++; });
  CHECK(n.load() == 8);
}
