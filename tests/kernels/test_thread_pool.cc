// ThreadPool: every task runs exactly once, nested runs are serial, exceptions reach the caller;
// the same whether the workers are still spinning from the last run, asleep, or never spin.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
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
  CHECK_THROWS_AS(pool.run(10,
                           [](size_t i) {
                             if (i == 3) throw std::runtime_error("task 3 failed");
                           }),
                  std::runtime_error);
  std::atomic<int> n{0};
  pool.run(8, [&](size_t) { n++; });
  CHECK(n.load() == 8);
}

TEST_CASE(
    "runs back to back, after the workers fell asleep, and oversubscribed see every task's writes",
    "[kernels]") {
  // Plain (non-atomic) writes by whichever thread ran the task must be visible to the caller when
  // run() returns: spinning workers hand their results over through the check-out counter,
  // sleeping ones through the mutex. 2 threads spin on a 2-CPU machine; 64 never spin.
  const uint32_t threads = GENERATE(2u, 64u);
  kernels::ThreadPool pool(threads);
  std::vector<int> out(64);
  const std::thread::id caller = std::this_thread::get_id();
  auto busy = [](std::chrono::microseconds us) {
    const auto until = std::chrono::steady_clock::now() + us;
    while (std::chrono::steady_clock::now() < until) {}
  };
  auto one_run = [&](int rep) {
    pool.run(out.size(), [&](size_t i) {
      // Every task takes a moment (so the workers, spinning or woken, get some of them), and a
      // worker's a longer one: a run() that returned before every worker checked out would see
      // stale values.
      const bool worker = std::this_thread::get_id() != caller;
      busy(std::chrono::microseconds(worker ? 20 : 2));
      out[i] = rep * 1000 + int(i);
    });
    for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == rep * 1000 + int(i));
  };
  for (int rep = 0; rep < 200; ++rep) one_run(rep);  // back to back: the spin path
  for (int rep = 0; rep < 5; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // past the spin: workers sleep
    one_run(5000 + rep);
  }
  // The workers take part, not only the caller: two tasks that each wait (up to 10 s) for the
  // other to have started finish only if two threads run them at once.
  std::atomic<int> started{0};
  std::atomic<int> met{0};
  pool.run(2, [&](size_t) {
    started++;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started.load() < 2 && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    if (started.load() == 2) met++;
  });
  CHECK(met.load() == 2);
}

TEST_CASE("a pool destroyed right after a run, its workers still spinning, joins them",
          "[kernels]") {
  for (int rep = 0; rep < 20; ++rep) {
    kernels::ThreadPool pool(2);
    std::atomic<int> n{0};
    pool.run(8, [&](size_t) { n++; });
    CHECK(n.load() == 8);
  }  // the destructor must wake the spinning workers and join them, not hang
}
