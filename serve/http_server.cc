// HttpServer: the reader thread that collects request heads, the checks on a complete head,
// the two worker pools, and the stream a worker hands to the library's request parser
// (see http_server.h for what each part defends against).
#include "serve/http_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "serve/detail/http_head.h"
#include "serve/detail/http_io.h"

namespace kvzip::serve {

using Clock = std::chrono::steady_clock;
using detail::Head;

namespace {
using namespace detail;
thread_local ConnState* t_conn = nullptr;
}  // namespace

struct HttpServer::Impl {
  struct Conn {
    int fd = -1;
    std::string peer;
    int port = 0;
    std::string buf;
    uint64_t seq = 0;
    Clock::time_point deadline, first_byte;
    bool got_byte = false;
    bool draining = false;  // lingering close: input discarded until EOF or the deadline
    uint32_t served = 0;
  };

  HttpServer& self;
  HttpLimits lim;
  BodyLimit body_limit;
  int ep = -1, wake = -1;
  std::mutex mu;
  std::unordered_map<int, std::unique_ptr<Conn>> conns;  // waiting for a head, or draining
  std::map<uint64_t, int> pending;                       // waiting for a head, oldest first
  std::unordered_map<std::string, std::map<uint64_t, int>> pending_by_peer;
  std::unordered_map<std::string, uint32_t> busy_by_peer;
  uint64_t next_seq = 0;
  std::atomic<bool> stopping{false};
  std::thread reader;
  Pool heavy, light;
  bool joined = false;

  Impl(HttpServer& s, HttpLimits l, BodyLimit bl)
      : self(s), lim(l), body_limit(std::move(bl)), heavy(l.workers), light(l.light_workers) {
    ep = ::epoll_create1(EPOLL_CLOEXEC);
    wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, wake, &ev);
    reader = std::thread([this] { read_loop(); });
  }

  // Takes a connection (new, or back from a worker with `buf` already read) into the reader.
  void add(int fd, std::string peer, int port, std::string buf, uint32_t served) {
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->peer = std::move(peer);
    c->port = port;
    c->buf = std::move(buf);
    c->served = served;
    c->deadline = Clock::now() + lim.head_timeout;
    c->got_byte = !c->buf.empty();
    c->first_byte = Clock::now();
    std::vector<int> evict;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopping) {
        ::close(fd);
        return;
      }
      c->seq = next_seq++;
      auto& mine = pending_by_peer[c->peer];
      if (lim.max_pending_per_client && mine.size() >= lim.max_pending_per_client)
        evict.push_back(mine.begin()->second);
      else if (lim.max_pending && pending.size() >= lim.max_pending)
        evict.push_back(pending.begin()->second);
      for (int v : evict) drop_locked(v, 0);
      pending[c->seq] = fd;
      pending_by_peer[c->peer][c->seq] = fd;
      Conn* raw = c.get();
      conns[fd] = std::move(c);
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.fd = fd;
      ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
      if (!raw->buf.empty()) on_bytes_locked(*raw);  // a pipelined request may be complete
    }
  }

  // Takes a connection out of the waiting order and its address's count (mu held).
  void unqueue_locked(const Conn& c) {
    pending.erase(c.seq);
    auto pb = pending_by_peer.find(c.peer);
    if (pb != pending_by_peer.end()) {
      pb->second.erase(c.seq);
      if (pb->second.empty()) pending_by_peer.erase(pb);
    }
  }

  // Forgets a waiting connection (mu held); closes it after a best-effort answer.
  void drop_locked(int fd, int status) {
    auto it = conns.find(fd);
    if (it == conns.end()) return;
    Conn& c = *it->second;
    ::epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
    if (!c.draining) unqueue_locked(c);
    if (status == 408 && !c.draining && c.got_byte) {
      static const char k408[] =
          "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
      ::send(fd, k408, sizeof k408 - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    ::close(fd);
    conns.erase(it);
  }

  // Answers `status` and closes, discarding what the client still sends for a moment, so that
  // the answer is not lost to a reset (a close with unread input resets the connection).
  void refuse_locked(Conn& c, int status, const std::string& body, const Head& h) {
    std::string msg =
        "HTTP/1.1 " + std::to_string(status) + " " + detail::reason(status) +
        "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    ::send(c.fd, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (self.on_refusal_)
      self.on_refusal_(
          Refusal{c.peer, h.method, h.target, status,
                  std::chrono::duration<double, std::milli>(Clock::now() - c.first_byte).count()});
    start_drain_locked(c);
  }

  void start_drain_locked(Conn& c) {
    if (!c.draining) unqueue_locked(c);
    c.draining = true;
    c.buf.clear();
    c.buf.shrink_to_fit();
    ::shutdown(c.fd, SHUT_WR);
    c.deadline = Clock::now() + std::chrono::seconds(2);
  }

  // New bytes in c.buf: a complete head is checked and handed to a worker.
  void on_bytes_locked(Conn& c) {
    const size_t end = c.buf.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (c.buf.size() > lim.max_head_bytes) {
        Head h;
        refuse_locked(c, 431,
                      detail::error_json(431, "head_too_large",
                                         "the request head is over " +
                                             std::to_string(lim.max_head_bytes) + " bytes"),
                      h);
      }
      return;
    }
    const size_t head_len = end + 4;
    Head h = detail::parse_head(std::string_view(c.buf).substr(0, head_len));
    if (h.status == 0) {
      const std::string path = h.target.substr(0, h.target.find('?'));
      const uint64_t cap = body_limit(h.method, path);
      if (!h.body_method && (h.chunked || h.length.value_or(0) > 0))
        h.status = 400, h.code = "unexpected_body", h.why = h.method + " takes no body";
      else if (h.body_method && cap == HttpServer::kNoRoute)
        h.status = 404, h.code = "", h.why = "no such route";
      else if (h.length && *h.length > cap)
        h.status = 413, h.code = "body_too_large",
        h.why = "the body is " + std::to_string(*h.length) + " bytes; " + path + " takes at most " +
                std::to_string(cap);
      else if (lim.max_client_requests && busy_by_peer.count(c.peer) &&
               busy_by_peer.at(c.peer) >= lim.max_client_requests)
        h.status = 429, h.code = "too_many_connections",
        h.why = "this address already has " + std::to_string(lim.max_client_requests) +
                " requests in service";
      h.cap = cap;
    }
    if (h.status != 0) {
      refuse_locked(c, h.status, detail::error_json(h.status, h.code, h.why), h);
      return;
    }
    // To a worker: the connection leaves the reader.
    ::epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
    pending.erase(c.seq);
    auto pb = pending_by_peer.find(c.peer);
    if (pb != pending_by_peer.end()) {
      pb->second.erase(c.seq);
      if (pb->second.empty()) pending_by_peer.erase(pb);
    }
    ++busy_by_peer[c.peer];
    auto owned = std::move(conns[c.fd]);
    conns.erase(c.fd);
    auto job = [this, conn = std::shared_ptr<Conn>(std::move(owned)), h, head_len]() mutable {
      serve_one(*conn, h, head_len);
    };
    (h.body_method ? heavy : light).post(std::move(job));
  }

  void serve_one(Conn& c, const Head& h, size_t head_len) {
    ConnState st;
    st.fd = c.fd;
    st.started = c.first_byte;
    st.target = h.target;
    const uint64_t body = h.length ? *h.length : h.chunked ? h.cap : 0;
    // Chunked framing costs bytes too: room for ordinary chunk sizes, never an unbounded read.
    const uint64_t raw_cap = h.length ? *h.length : h.chunked ? h.cap + h.cap / 8 + 65536 : 0;
    const auto body_deadline =
        Clock::now() + lim.body_timeout +
        std::chrono::milliseconds(body * 1000 / std::max<uint64_t>(1, lim.body_min_rate));
    ConnStream strm(c.fd, std::move(c.buf), head_len, c.peer, c.port, raw_cap, body_deadline,
                    lim.io_timeout, stopping, st);
    ++c.served;
    const bool last = c.served >= lim.keep_alive_max || h.chunked || stopping;
    bool closed = false;
    t_conn = &st;
    const bool ok = self.process_request(strm, last, closed, nullptr);
    t_conn = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto b = busy_by_peer.find(c.peer);
      if (b != busy_by_peer.end() && --b->second == 0) busy_by_peer.erase(b);
    }
    const bool body_unread = h.length ? strm.body_read() < *h.length : h.chunked;
    if (!ok || closed || last || st.close || st.over_limit || body_unread || stopping) {
      // Lingering close through the reader: the answer is not lost to a reset.
      auto d = std::make_unique<Conn>();
      d->fd = c.fd;
      d->peer = c.peer;
      std::lock_guard<std::mutex> lock(mu);
      if (stopping) {
        ::close(c.fd);
        return;
      }
      d->seq = next_seq++;
      d->draining = true;
      Conn& r = *d;
      conns[c.fd] = std::move(d);
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.fd = c.fd;
      ::epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
      start_drain_locked(r);
      return;
    }
    add(c.fd, c.peer, c.port, strm.leftover(), c.served);
  }

  void read_loop() {
    std::vector<epoll_event> evs(128);
    std::vector<char> tmp(16384);
    while (!stopping) {
      const int n = ::epoll_wait(ep, evs.data(), static_cast<int>(evs.size()), 100);
      std::lock_guard<std::mutex> lock(mu);
      for (int i = 0; i < n; ++i) {
        const int fd = evs[i].data.fd;
        if (fd == wake) continue;
        auto it = conns.find(fd);
        if (it == conns.end()) continue;
        Conn& c = *it->second;
        const ssize_t got = ::recv(fd, tmp.data(), tmp.size(), MSG_DONTWAIT);
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (got <= 0) {
          drop_locked(fd, 0);
          continue;
        }
        if (c.draining) continue;  // discarded
        if (!c.got_byte) c.got_byte = true, c.first_byte = Clock::now();
        // A keep-alive connection's next head gets the whole head_timeout from its first byte.
        if (c.served > 0 && c.buf.empty()) c.deadline = Clock::now() + lim.head_timeout;
        c.buf.append(tmp.data(), static_cast<size_t>(got));
        on_bytes_locked(c);
      }
      const auto now = Clock::now();
      std::vector<int> late;
      for (const auto& [fd, c] : conns)
        if (now >= c->deadline) late.push_back(fd);
      for (int fd : late) drop_locked(fd, 408);
    }
  }

  void stop() {
    if (joined) return;
    joined = true;
    stopping = true;
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(wake, &one, sizeof one);
    if (reader.joinable()) reader.join();
    heavy.stop();
    light.stop();
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [fd, c] : conns) ::close(fd);
    conns.clear();
    pending.clear();
    pending_by_peer.clear();
  }

  ~Impl() {
    stop();
    ::close(ep);
    ::close(wake);
  }
};

HttpServer::HttpServer(HttpLimits limits, BodyLimit body_limit) {
  new_task_queue = [] { return new InlineQueue; };
  // SO_REUSEADDR: a restart may bind while old connections linger in TIME_WAIT. Not SO_REUSEPORT
  // (the library's default): with it a second server binds the same port and takes half the
  // traffic.
  set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  set_payload_max_length(std::numeric_limits<size_t>::max());  // limits are ours, per route
  set_keep_alive_max_count(limits.keep_alive_max);
  impl_ = std::make_unique<Impl>(*this, limits, std::move(body_limit));
}

HttpServer::~HttpServer() { impl_->stop(); }

int HttpServer::bind(const std::string& host, int port) {
  errno = 0;
  const int p = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
  if (p <= 0) return -1;
  // The library listens with a backlog fixed when it was built (5); listen() again on its own
  // socket only changes the queue length.
  ::listen(svr_sock_, impl_->lim.backlog);
  return p;
}

void HttpServer::shutdown() { impl_->stop(); }

void HttpServer::set_access_logger(httplib::Logger fn) {
  set_logger([fn = std::move(fn)](const httplib::Request& req, const httplib::Response& res) {
    if (t_conn) t_conn->status = res.status;
    if (fn) fn(req, res);
  });
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  int port = 0;
  std::string peer = peer_of(sock, &port);
  ::fcntl(sock, F_SETFL, ::fcntl(sock, F_GETFL) | O_NONBLOCK);
  impl_->add(sock, std::move(peer), port, {}, 0);
  return true;
}

bool HttpServer::client_gone() {
  if (!t_conn) return false;
  pollfd p{t_conn->fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) != 1) return false;
  if (p.revents & (POLLERR | POLLHUP)) return true;
  char c;
  const ssize_t n = ::recv(t_conn->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // a pipelined request: still there
  if (n < 0) return errno != EAGAIN && errno != EINTR;
  // EOF: closed, or only half-closed. An interim answer every client must accept (RFC 9110
  // 15.2) tells them apart: a closed socket answers it with a reset (POLLERR next time).
  if (!t_conn->probed) {
    t_conn->probed = true;
    static const char k100[] = "HTTP/1.1 100 Continue\r\n\r\n";
    if (::send(t_conn->fd, k100, sizeof k100 - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) return true;
  }
  return false;
}

Clock::time_point HttpServer::request_started() { return t_conn ? t_conn->started : Clock::now(); }

std::string HttpServer::request_target() { return t_conn ? t_conn->target : std::string(); }

void HttpServer::close_after() {
  if (t_conn) t_conn->close = true;
}

bool HttpServer::body_over_limit() { return t_conn && t_conn->over_limit; }

}  // namespace kvzip::serve
