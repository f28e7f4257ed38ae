// ConnStream's socket I/O and the peer address helper (see http_io.h).
#include "serve/detail/http_io.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace kvzip::serve::detail {

namespace {

// The address of `a` as text, its port in *port; "" and 0 for other families.
std::string address_text(const sockaddr_storage& a, int* port) {
  char ip[INET6_ADDRSTRLEN] = "";
  *port = 0;
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, ip, sizeof ip);
    *port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, ip, sizeof ip);
    *port = ntohs(v6->sin6_port);
  }
  return ip;
}

}  // namespace

std::string peer_of(int fd, int* port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  *port = 0;
  return ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 ? address_text(a, port)
                                                                       : std::string();
}

ssize_t ConnStream::read(char* ptr, size_t size) {
  if (pos_ >= buf_.size()) {
    if (consumed_ >= head_len_ && consumed_ - head_len_ >= body_cap_) {
      state_.over_limit = true;  // the library asks for more than the route takes
      return -1;
    }
    buf_.resize(16384);
    pos_ = 0;
    ssize_t n = -1;
    while (true) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
      if (left <= 0 || stopping_) break;
      if (!wait(POLLIN, static_cast<int>(std::min<int64_t>(left, 200)))) continue;
      n = ::recv(fd_, buf_.data(), buf_.size(), 0);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      break;
    }
    buf_.resize(n > 0 ? static_cast<size_t>(n) : 0);
    if (n <= 0) return -1;
  }
  size_t n = std::min(size, buf_.size() - pos_);
  if (consumed_ + n > head_len_) {  // body bytes: never past the cap
    const uint64_t body_before = consumed_ > head_len_ ? consumed_ - head_len_ : 0;
    const uint64_t room = body_cap_ - std::min(body_cap_, body_before);
    const uint64_t head_part = consumed_ < head_len_ ? head_len_ - consumed_ : 0;
    if (n > head_part + room) n = static_cast<size_t>(head_part + room);
    if (n == 0) {
      state_.over_limit = true;
      return -1;
    }
  }
  std::memcpy(ptr, buf_.data() + pos_, n);
  pos_ += n;
  consumed_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t ConnStream::write(const char* ptr, size_t size) {
  size_t sent = 0;
  while (sent < size) {
    if (!wait(POLLOUT, static_cast<int>(io_timeout_.count()))) return sent ? ssize_t(sent) : -1;
    const ssize_t n = ::send(fd_, ptr + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return sent ? ssize_t(sent) : -1;
    sent += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(sent);
}

void ConnStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  port = 0;
  ip = ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0 ? address_text(a, &port)
                                                                      : std::string();
}

bool ConnStream::wait(short events, int ms) const {
  pollfd p{fd_, events, 0};
  return ::poll(&p, 1, ms) == 1 && (p.revents & (events | POLLHUP | POLLERR));
}

}  // namespace kvzip::serve::detail
