// The listening sockets of the gRPC ports, owned here instead of by gRPC,
// so that running out of file descriptors refuses new connections instead
// of losing the listener: gRPC 1.51 stops accepting on a port for good the
// first time accept4 fails with EMFILE (grpc/grpc#20418), and the server
// then answers no one, health included, long after the descriptors are
// back. Connections accepted here are handed to gRPC whole
// (ExternalConnectionAcceptor), with the port's credentials.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace grpc::experimental {
class ExternalConnectionAcceptor;
}

namespace tally {

class ConnectionGate {
 public:
  // Binds and listens on `address` ("host:port", "[v6]:port"; port 0 picks
  // a free port), without SO_REUSEPORT: a port another process listens on
  // is UNAVAILABLE naming it. New connections are refused (accepted and
  // closed at once) while fewer than `min_free_fds` file descriptors are
  // left under the process's limit.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ConnectionGate>> Listen(const std::string& address,
                                                                             int min_free_fds);
  // Whether `address` names sockets this gate can own (TCP); others (unix:)
  // are left to gRPC.
  static bool Handles(const std::string& address);
  ~ConnectionGate();  // Stop()
  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;

  int port() const { return port_; }
  // Hands each accepted connection to `acceptor`, from a thread of its own,
  // until Stop().
  void Start(std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor);
  // Stops accepting and closes the listening sockets; later connections are
  // refused by the kernel.
  void Stop();
  // Connections refused for want of file descriptors since the start.
  std::uint64_t refused() const { return refused_.load(); }

 private:
  ConnectionGate() = default;
  void Run();
  // Accepts one connection from `listener` and hands it on, or refuses it.
  void AcceptOne(int listener);
  // Whether a new connection leaves min_free_fds_ free; counts the open
  // descriptors only when an estimate says they may be short.
  bool HasRoom();

  std::vector<int> listeners_;
  int port_ = 0;
  int min_free_fds_ = 0;
  int wake_[2] = {-1, -1};  // a pipe: Stop() writes to end the thread's poll
  int spare_fd_ = -1;       // given up to accept (and close) a connection at EMFILE
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::thread thread_;
  std::atomic<std::uint64_t> refused_{0};
  // HasRoom's estimate: the descriptors open at the last count, plus those
  // accepted since (closed ones only make it pessimistic).
  long counted_fds_ = 0;
  long accepted_since_count_ = 0;
  std::chrono::steady_clock::time_point counted_at_;
  bool refusing_ = false;  // for logging the change only
};

}  // namespace tally
