// The parts of serve/http_server.cc that know nothing of connections waiting for a head: what a
// worker knows of the connection it serves, the worker pools, and the stream it hands the
// library's request parser. Internal to serve/.
#pragma once
#include <httplib.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvzip::serve::detail {

using Clock = std::chrono::steady_clock;

// What a worker and the route handlers it runs know about the connection being served.
struct ConnState {
  int fd = -1;
  Clock::time_point started;
  std::string target;
  bool probed = false;      // an interim 100 Continue was sent to tell half-close from gone
  bool close = false;       // close after this answer
  bool over_limit = false;  // the body passed the route's limit while read
  int status = 0;           // of the answer, from the access logger
};

// The client's address (and port) of a connected socket, as text.
std::string peer_of(int fd, int* port);

// A fixed set of threads running queued jobs in order.
class Pool {
 public:
  explicit Pool(uint32_t n) {
    for (uint32_t i = 0; i < std::max<uint32_t>(1, n); ++i)
      threads_.emplace_back([this] { work(); });
  }
  ~Pool() { stop(); }
  void post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }
  // Runs what is queued, then joins.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void work() {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// The library runs each accepted socket's process_and_close_socket on the queue's thread; ours
// only hands the socket to the reader, so it runs on the accept thread itself.
struct InlineQueue : httplib::TaskQueue {
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// The stream a worker gives process_request: the head (and whatever followed it) from the
// reader's buffer, then the socket, with poll() against one deadline for the whole body and a
// byte limit on it, so neither a trickling nor an endless body holds a worker.
class ConnStream : public httplib::Stream {
 public:
  ConnStream(int fd, std::string buf, size_t head_len, const std::string& peer, int peer_port,
             uint64_t body_cap, Clock::time_point body_deadline,
             std::chrono::milliseconds io_timeout, const std::atomic<bool>& stopping,
             ConnState& state)
      : fd_(fd),
        buf_(std::move(buf)),
        head_len_(head_len),
        peer_(peer),
        peer_port_(peer_port),
        body_cap_(body_cap),
        deadline_(body_deadline),
        io_timeout_(io_timeout),
        stopping_(stopping),
        state_(state) {}

  bool is_readable() const override { return pos_ < buf_.size() || wait(POLLIN, 0); }
  bool is_writable() const override { return wait(POLLOUT, static_cast<int>(io_timeout_.count())); }

  ssize_t read(char* ptr, size_t size) override;

  ssize_t write(const char* ptr, size_t size) override;

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = peer_;
    port = peer_port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  // The library consults it only to refuse descriptors past select()'s FD_SETSIZE, which it
  // would select() on; this stream waits with poll(), so a high descriptor is reported low.
  socket_t socket() const override { return fd_ < FD_SETSIZE ? fd_ : 0; }

  // Bytes read past this request (a pipelined next one); the body must have been read whole.
  std::string leftover() const { return buf_.substr(std::min(pos_, buf_.size())); }
  uint64_t body_read() const { return consumed_ > head_len_ ? consumed_ - head_len_ : 0; }

 private:
  bool wait(short events, int ms) const;  // poll() for `events` (or an error) up to ms
  int fd_;
  std::string buf_;
  size_t pos_ = 0;
  uint64_t head_len_, consumed_ = 0;
  std::string peer_;
  int peer_port_;
  uint64_t body_cap_;
  Clock::time_point deadline_;
  std::chrono::milliseconds io_timeout_;
  const std::atomic<bool>& stopping_;
  ConnState& state_;
};

}  // namespace kvzip::serve::detail
