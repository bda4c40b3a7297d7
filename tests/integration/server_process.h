// A tally-server process of its own (the real binary), for what only a
// whole process shows: a SIGKILL, a restart, what it logs at start. Its
// output is kept, line by line, for the test to read and wait on.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/grpcpp.h"

namespace tally::testing {

class ServerProcess {
 public:
  // Starts `binary` with `args` (besides --listen on a free loopback port
  // and no metrics endpoint) and waits until it listens, or has exited.
  ServerProcess(const std::string& binary, const std::vector<std::string>& args) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return;
    std::vector<std::string> argv{binary, "--listen=127.0.0.1:0", "--metrics_listen="};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::dup2(out[1], 2);
      std::vector<char*> raw;
      for (std::string& a : argv) raw.push_back(a.data());
      raw.push_back(nullptr);
      ::execv(binary.c_str(), raw.data());
      ::_exit(127);
    }
    ::close(out[1]);
    reader_ = std::thread([this, fd = out[0]] { Read(fd); });
    const std::string listening = "listening on port ";
    if (!WaitFor(listening, std::chrono::seconds(60))) return;
    const std::string line = LineWith(listening);
    port_ = std::atoi(line.c_str() + line.find(listening) + listening.size());
  }

  ~ServerProcess() {
    Signal(SIGKILL);
    Wait();
    if (reader_.joinable()) reader_.join();
  }

  // The port it listens on; 0 when it did not start.
  int port() const { return port_; }
  std::shared_ptr<grpc::Channel> Channel() const {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own: the next server is another
    return grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials(), args);
  }

  void Signal(int signal) {
    if (pid_ > 0 && !status_) ::kill(pid_, signal);
  }
  // Waits for it to exit; its exit status as waitpid gives it.
  int Wait() {
    if (pid_ > 0 && !status_) {
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      status_ = status;
    }
    return status_.value_or(-1);
  }

  // Waits up to `limit` for a line of its output that contains `text`.
  bool WaitFor(const std::string& text, std::chrono::seconds limit = std::chrono::seconds(30)) {
    std::unique_lock lock(mu_);
    return grew_.wait_for(lock, limit, [&] { return Has(text) || ended_; }) && Has(text);
  }
  // Every line so far that contains `text`.
  std::vector<std::string> Lines(const std::string& text) {
    std::lock_guard lock(mu_);
    std::vector<std::string> out;
    for (const std::string& line : lines_) {
      if (line.find(text) != std::string::npos) out.push_back(line);
    }
    return out;
  }
  std::string Output() {
    std::lock_guard lock(mu_);
    std::string out;
    for (const std::string& line : lines_) out += line + "\n";
    return out;
  }

 private:
  bool Has(const std::string& text) const {
    for (const std::string& line : lines_) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }
  std::string LineWith(const std::string& text) {
    std::vector<std::string> found = Lines(text);
    return found.empty() ? std::string() : found.front();
  }
  void Read(int fd) {
    std::string partial;
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::read(fd, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      partial.append(buffer, static_cast<std::size_t>(n));
      std::lock_guard lock(mu_);
      for (std::size_t end; (end = partial.find('\n')) != std::string::npos; partial.erase(0, end + 1)) {
        lines_.push_back(partial.substr(0, end));
      }
      grew_.notify_all();
    }
    ::close(fd);
    std::lock_guard lock(mu_);
    if (!partial.empty()) lines_.push_back(partial);
    ended_ = true;
    grew_.notify_all();
  }

  pid_t pid_ = -1;
  int port_ = 0;
  std::optional<int> status_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable grew_;
  std::vector<std::string> lines_;
  bool ended_ = false;
};

}  // namespace tally::testing
