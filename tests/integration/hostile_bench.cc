// tally_hostile_bench: measures what one attack does to a well-behaved
// client of a running server: the client alone, then while the attack goes
// on. Used for the before/after figures in docs/performance.md
// (tests/integration/idle_attack_before_after.sh).
//
//   tally_hostile_bench --target=127.0.0.1:50051 --attack=idle --attackers=64
#include <cstdio>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "tests/integration/hostile_clients.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "The server, host:port.");
ABSL_FLAG(std::string, attack, "idle",
          "idle: streams that send a header and nothing more; trickle: a byte every 100 ms after the "
          "header; none.");
ABSL_FLAG(int, attackers, 64, "Attacking streams, each on its own connection.");
ABSL_FLAG(std::uint64_t, array_bytes, std::uint64_t{1} << 30, "The array size each attacking header announces.");
ABSL_FLAG(int, requests, 20, "Requests of the well-behaved client per measurement.");
ABSL_FLAG(int, deadline_ms, 10000, "The well-behaved client's deadline per request.");
ABSL_FLAG(int, wait_end_seconds, 15,
          "After the measurement, how long to wait for the server to end the attacking streams itself.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("measures a well-behaved client of a tally server alone, then under an attack");
  absl::ParseCommandLine(argc, argv);
  using namespace tally::hostile;
  const std::string target = absl::GetFlag(FLAGS_target);
  const std::string attack = absl::GetFlag(FLAGS_attack);
  const int requests = absl::GetFlag(FLAGS_requests);
  const std::chrono::milliseconds deadline(absl::GetFlag(FLAGS_deadline_ms));
  if (attack != "idle" && attack != "trickle" && attack != "none") {
    std::fprintf(stderr, "--attack: expected idle, trickle or none, got '%s'\n", attack.c_str());
    return 2;
  }

  auto channel = NewConnection(target);
  WellBehavedClient(channel, 4, deadline);  // warm up
  const ServedRun alone = WellBehavedClient(channel, requests, deadline);
  std::printf("well-behaved client alone:          %s\n", alone.Summary().c_str());
  if (attack == "none") return 0;

  SilentStreams attackers(target, absl::GetFlag(FLAGS_attackers), absl::GetFlag(FLAGS_array_bytes),
                          attack == "trickle" ? 100ms : 0ms);
  if (!attackers.WaitStarted()) {
    std::fprintf(stderr, "the attacking streams did not all start\n");
    return 1;
  }
  std::this_thread::sleep_for(500ms);  // the server has read every header
  const auto start = std::chrono::steady_clock::now();
  const ServedRun attacked = WellBehavedClient(channel, requests, deadline);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("well-behaved client under %-9s %s (%.1f s for %d requests)\n", (attack + ":").c_str(),
              attacked.Summary().c_str(), seconds, requests);
  const std::chrono::seconds wait_end(absl::GetFlag(FLAGS_wait_end_seconds));
  const bool all_ended = attackers.WaitEnded(wait_end);
  const double ended_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string by_server = attackers.outcomes().Summary();
  attackers.Stop();
  for (grpc::StatusCode unexpected : {grpc::StatusCode::UNAVAILABLE, grpc::StatusCode::INTERNAL}) {
    const std::string message = attackers.outcomes().AnyMessage(unexpected);
    if (!message.empty()) std::printf("an attacking stream ended with code %d: %s\n", unexpected, message.c_str());
  }
  if (all_ended) {
    std::printf("the server ended every attacking stream within %.1f s of the measurement's start: %s\n",
                ended_after, by_server.c_str());
  } else {
    std::printf("attacking streams still open %.0f s after the measurement's start (cancelled by the bench): %s\n",
                ended_after, attackers.outcomes().Summary().c_str());
  }
  return 0;
}
