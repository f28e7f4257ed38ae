// ThreadPool: every task runs exactly once, nested runs are serial, exceptions reach the caller;
// the same whether the workers are still spinning from the last run, asleep, or never spin.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
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

TEST_CASE("runs back to back, after the workers fell asleep, and oversubscribed see every task's writes",
          "[kernels]") {
  // Plain (non-atomic) writes by whichever thread ran the task must be visible to the caller when
  // run() returns: spinning workers hand their results over through the check-out counter,
  // sleeping ones through the mutex. 2 threads spin on a 2-CPU machine; 64 never spin.
  const uint32_t threads = GENERATE(2u, 64u);
  kernels::ThreadPool pool(threads);
  std::vector<int> out(64);
  std::set<std::thread::id> ran;
  std::mutex mu;
  const std::thread::id caller = std::this_thread::get_id();
  auto one_run = [&](int rep) {
    pool.run(out.size(), [&](size_t i) {
      // A worker's task finishes late, so a run() that returned before every worker checked out
      // would see stale values.
      if (std::this_thread::get_id() != caller) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
        while (std::chrono::steady_clock::now() < until) {
        }
      }
      out[i] = rep * 1000 + int(i);
      if (i % 16 == 0) {
        std::lock_guard<std::mutex> lk(mu);
        ran.insert(std::this_thread::get_id());
      }
    });
    for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == rep * 1000 + int(i));
  };
  for (int rep = 0; rep < 2000; ++rep) one_run(rep);  // back to back: the spin path
  for (int rep = 0; rep < 5; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // past the spin: workers sleep
    one_run(5000 + rep);
  }
  CHECK(ran.size() >= 2);  // the workers took part, not only the caller
}

TEST_CASE("a pool destroyed right after a run, its workers still spinning, joins them", "[kernels]") {
  for (int rep = 0; rep < 20; ++rep) {
    kernels::ThreadPool pool(2);
    std::atomic<int> n{0};
    pool.run(8, [&](size_t) { n++; });
    CHECK(n.load() == 8);
  }  // the destructor must wake the spinning workers and join them, not hang
}
