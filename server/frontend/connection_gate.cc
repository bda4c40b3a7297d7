#include "server/frontend/connection_gate.h"

#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"

namespace tally {
namespace {

// How often the open descriptors are counted while the estimate says they
// may be short (a count reads /proc/self/fd), and at most how long an
// estimate is trusted (descriptors opened elsewhere in the process are not
// in it).
constexpr auto kRecountWhenShort = std::chrono::milliseconds(10);
constexpr auto kRecountAnyway = std::chrono::milliseconds(250);
// Connections accepted per listener per wake-up, so that one busy port
// does not starve the other.
constexpr int kAcceptsPerWake = 64;

long OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;  // out of descriptors itself, or no /proc
  long n = 0;
  while (const dirent* e = readdir(dir)) n += e->d_name[0] != '.';
  closedir(dir);
  return n - 1;  // the directory's own descriptor
}

long FdLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return 1L << 30;
  return static_cast<long>(lim.rlim_cur);
}

struct HostPort {
  std::string host;
  std::string port;
};

absl::StatusOr<HostPort> Split(const std::string& address) {
  HostPort hp;
  std::size_t colon;
  if (!address.empty() && address[0] == '[') {
    const std::size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not [host]:port."));
    }
    hp.host = address.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = address.rfind(':');
    if (colon == std::string::npos) return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not host:port."));
    hp.host = address.substr(0, colon);
  }
  hp.port = address.substr(colon + 1);
  int port = 0;
  if (!absl::SimpleAtoi(hp.port, &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "': '", hp.port, "' is not a port."));
  }
  return hp;
}

int PortOf(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

// A listening socket on `addr`, with `port` in place of its port when not 0.
// No SO_REUSEPORT: a second process cannot listen on the same port.
absl::StatusOr<int> ListenOn(const addrinfo& ai, int port, bool dual_stack, const std::string& address) {
  const int fd = socket(ai.ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // restart past TIME_WAIT
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // inherited by accepted sockets
  if (ai.ai_family == AF_INET6 && dual_stack) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  sockaddr_storage addr{};
  std::memcpy(&addr, ai.ai_addr, ai.ai_addrlen);
  if (port != 0) {
    if (ai.ai_family == AF_INET6) {
      reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port = htons(static_cast<std::uint16_t>(port));
    } else {
      reinterpret_cast<sockaddr_in*>(&addr)->sin_port = htons(static_cast<std::uint16_t>(port));
    }
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), ai.ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
    const int err = errno;
    close(fd);
    if (err == EADDRINUSE) {
      return absl::UnavailableError(
          absl::StrCat("could not listen on ", address, ": port ", port, " is in use by another process."));
    }
    return absl::UnavailableError(absl::StrCat("could not listen on ", address, ": ", std::strerror(err), "."));
  }
  return fd;
}

}  // namespace

bool ConnectionGate::Handles(const std::string& address) { return !absl::StartsWith(address, "unix:"); }

absl::StatusOr<std::unique_ptr<ConnectionGate>> ConnectionGate::Listen(const std::string& address,
                                                                       int min_free_fds) {
  absl::StatusOr<HostPort> hp = Split(address);
  if (!hp.ok()) return hp.status();
  std::unique_ptr<ConnectionGate> gate(new ConnectionGate());
  gate->min_free_fds_ = min_free_fds;
  // A wildcard host listens on every address, IPv4 and IPv6, as gRPC's own
  // listener does: one dual-stack socket where IPv6 is available.
  const bool wildcard = hp->host.empty() || hp->host == "0.0.0.0" || hp->host == "::" || hp->host == "*";
  std::vector<const char*> hosts;
  if (wildcard) {
    hosts = {"::", "0.0.0.0"};
  } else {
    hosts = {hp->host.c_str()};
  }
  int port = std::stoi(hp->port);
  absl::Status first_error;
  for (const char* host : hosts) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (const int rc = getaddrinfo(host, hp->port.c_str(), &hints, &found); rc != 0) {
      if (first_error.ok()) {
        first_error = absl::UnavailableError(absl::StrCat("could not listen on ", address, ": ", gai_strerror(rc), "."));
      }
      continue;
    }
    for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
      absl::StatusOr<int> fd = ListenOn(*ai, port, wildcard, address);
      if (!fd.ok()) {
        if (absl::StrContains(fd.status().message(), "in use")) {
          freeaddrinfo(found);
          return fd.status();  // the gate's destructor closes what it opened
        }
        if (first_error.ok()) first_error = fd.status();
        continue;
      }
      gate->listeners_.push_back(*fd);
      if (port == 0) port = PortOf(*fd);
    }
    freeaddrinfo(found);
    if (wildcard && !gate->listeners_.empty()) break;  // the dual-stack socket took IPv4 too
  }
  if (gate->listeners_.empty()) return first_error;
  gate->port_ = port;
  if (pipe2(gate->wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  gate->spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  return gate;
}

ConnectionGate::~ConnectionGate() {
  Stop();
  for (int fd : {wake_[0], wake_[1], spare_fd_}) {
    if (fd >= 0) close(fd);
  }
}

void ConnectionGate::Start(std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor) {
  acceptor_ = std::move(acceptor);
  counted_at_ = std::chrono::steady_clock::now() - kRecountAnyway;
  thread_ = std::thread([this] { Run(); });
}

void ConnectionGate::Stop() {
  if (thread_.joinable()) {
    const char byte = 0;
    (void)!write(wake_[1], &byte, 1);
    thread_.join();
  }
  for (int fd : listeners_) close(fd);
  listeners_.clear();
}

void ConnectionGate::Run() {
  std::vector<pollfd> fds;
  for (int fd : listeners_) fds.push_back(pollfd{fd, POLLIN, 0});
  fds.push_back(pollfd{wake_[0], POLLIN, 0});
  for (;;) {
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("listener: poll failed: {}; no new connections are accepted", std::strerror(errno));
      return;
    }
    if (fds.back().revents != 0) return;
    for (std::size_t i = 0; i + 1 < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      for (int n = 0; n < kAcceptsPerWake; ++n) {
        const int fd = accept4(fds[i].fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE) {
            // Out of descriptors despite the margin (something else in the
            // process took them): refuse the connection with the spare one
            // rather than leave it to wake the poll again.
            close(spare_fd_);
            const int refused = accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
            if (refused >= 0) close(refused);
            spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
            ++refused_;
            continue;
          }
          break;  // EAGAIN: drained; ECONNABORTED, EINTR: the next wake-up
        }
        if (!HasRoom()) {
          close(fd);
          ++refused_;
          continue;
        }
        ++accepted_since_count_;
        grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
        p.listener_fd = fds[i].fd;
        p.fd = fd;
        acceptor_->HandleNewConnection(&p);  // gRPC owns the descriptor from here
      }
    }
  }
}

bool ConnectionGate::HasRoom() {
  const long limit = FdLimit();
  const auto now = std::chrono::steady_clock::now();
  const long cap = limit - std::min<long>(min_free_fds_, limit / 4);
  const bool short_maybe = counted_fds_ + accepted_since_count_ >= cap;
  if (now - counted_at_ >= (short_maybe ? kRecountWhenShort : kRecountAnyway)) {
    const long open = OpenFds();
    counted_fds_ = open < 0 ? limit : open;
    accepted_since_count_ = 0;
    counted_at_ = now;
  }
  const bool room = counted_fds_ + accepted_since_count_ < cap;
  if (room == refusing_) {
    refusing_ = !room;
    if (refusing_) {
      spdlog::warn("refusing new connections: {} of {} file descriptors are open, and {} are kept free "
                   "(raise the process's limit, e.g. LimitNOFILE or ulimit -n)",
                   counted_fds_ + accepted_since_count_, limit, limit - cap);
    } else {
      spdlog::info("accepting new connections again ({} of {} file descriptors open); {} refused so far",
                   counted_fds_ + accepted_since_count_, limit, refused_.load());
    }
  }
  return room;
}

}  // namespace tally
