// tally-server: serves tally.v1.Aggregator over gRPC.
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "server/allocator.h"
#include "server/receive_arena.h"
#include "server/frontend/server.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50051",
          "Address to serve gRPC on (host:port; port 0 picks a free port). A port another process "
          "(another tally-server too) listens on stops the start with an error naming the port.");
ABSL_FLAG(std::string, backend, "auto",
          "What computes the aggregations: auto (cuda when a GPU is visible, else cpu), cpu, cuda, or "
          "null (does all RPC work, discards the data, returns empty results; for measuring the "
          "transport).");
ABSL_FLAG(std::uint64_t, max_message_bytes, std::uint64_t{64} << 20,
          "Largest array, in bytes, that the unary Aggregate call accepts; larger arrays must use "
          "AggregateStream, whose chunks must each be below this size too. A unary message up to "
          "twice this (at least this + 16 MiB) is answered RESOURCE_EXHAUSTED with advice to "
          "stream; a larger one is refused by gRPC itself (RESOURCE_EXHAUSTED, \"Received message "
          "larger than max\"), after gRPC has read it whole.");
ABSL_FLAG(std::uint64_t, max_inflight_bytes, std::uint64_t{4} << 30,
          "Bytes that requests in progress may hold together (a unary request its array, a stream "
          "the chunks it has received and not yet reduced; Aggregate, AggregateStream, AggregateDataset "
          "and AggregateRegion also their results while they run, 16 bytes per result value; GroupBy and "
          "GroupByStream their table, 20 bytes a row while it is grouped, a streamed table's chunks kept "
          "until the end, and a streamed table past this whole budget refused at its header); past it a "
          "request, or a stream's next chunk, waits up to --admission_wait_ms, then gets RESOURCE_EXHAUSTED. It also sizes gRPC's "
          "own quota for received messages, this plus 4 x --max_message_bytes (more when that is "
          "under 16 MiB): gRPC reads every message whole before any size check, and past the quota it "
          "resets streams it is still reading (RESOURCE_EXHAUSTED, \"Received RST_STREAM with error "
          "code 11\"; best effort). 0: no limit on either.");
ABSL_FLAG(int, admission_wait_ms, 2000,
          "How long a request waits for room under --max_inflight_bytes before RESOURCE_EXHAUSTED.");
// Against idle, slow and greedy clients (README, SECURITY).
ABSL_FLAG(int, stream_idle_timeout_ms, 5000,
          "An AggregateStream that sends no message for this long while the server waits for one "
          "is ended with DEADLINE_EXCEEDED, and what it held is freed. 0: never.");
ABSL_FLAG(std::uint64_t, stream_min_bytes_per_second, std::uint64_t{64} << 10,
          "After its header, an AggregateStream must send at least this many bytes per second, "
          "judged over each 10 s the server waits for it, or it is ended with DEADLINE_EXCEEDED. "
          "0: no minimum.");
ABSL_FLAG(int, max_concurrent_streams, 100, "Calls one client connection may have in progress at once.");
ABSL_FLAG(int, max_connection_idle_seconds, 300,
          "A connection with no call in progress for this long is closed (clients reconnect). 0: never.");
ABSL_FLAG(int, max_connection_age_seconds, 1800,
          "A connection older than this (+-10%) is asked to go away; its calls get "
          "--max_connection_age_grace_seconds to finish. 0: never.");
ABSL_FLAG(int, max_connection_age_grace_seconds, 600,
          "How long calls in progress on a connection past its age may go on. 0: as long as they need.");
ABSL_FLAG(int, keepalive_seconds, 60,
          "The server pings a connection quiet this long and closes it if no answer comes in 20 s. "
          "0: no pings.");
ABSL_FLAG(int, min_free_file_descriptors, 0,
          "New connections are refused (accepted and closed at once) while fewer file descriptors than this "
          "(at most a quarter of the limit) are left under the process's limit, so that running out refuses "
          "connections instead of stopping the listener; they are accepted again as descriptors come back. "
          "At start the soft limit on open files is raised to the hard limit. 0 (the default): gRPC accepts "
          "connections on its own listener, without this guard (a listener gRPC 1.51 loses for good the "
          "first time accept fails for want of descriptors); with the guard, connections that tally accepts "
          "and hands to gRPC were measured 4x slower to stream on a 4-GPU host (3.0 against 12.1 GB/s).");
ABSL_FLAG(int, min_client_ping_interval_seconds, 10,
          "Clients may ping at most this often; one that pings more often is told to go away. 0: no "
          "minimum.");
// TLS, authentication and quotas (README, SECURITY).
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain (leaf first) for the gRPC port; with --tls_key_file, the port speaks TLS "
          "only and plaintext clients cannot connect. Empty: plaintext. The files are re-read every "
          "--tls_refresh_seconds, so a rotated certificate (cert-manager's Secret volume) is used for new "
          "connections without a restart.");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file's leaf certificate (not encrypted).");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA certificates for mutual TLS: a client certificate, when sent, must chain to one of them "
          "or the handshake fails. Empty: client certificates are not asked for.");
ABSL_FLAG(bool, tls_require_client_cert, false,
          "With --tls_client_ca_file: refuse the handshake of clients that send no certificate.");
ABSL_FLAG(int, tls_refresh_seconds, 60,
          "How often the TLS files are looked at for changes (at least 1).");
ABSL_FLAG(std::string, auth_token_file, "",
          "Bearer tokens the Aggregator calls must carry (metadata `authorization: Bearer <token>`): a file of "
          "lines `<sha256 hex of the token> <identity>` ('#' comments). Re-read within two seconds when it "
          "changes (once it has stopped changing); a file that is unreadable, malformed or empty keeps the "
          "tokens read before, and the log says why. Replace it atomically (write a new file, rename it over "
          "this one). A call without an accepted token gets UNAUTHENTICATED. Health (and reflection) stay open. "
          "Empty (and no --auth_identity_from_client_cert): no authentication, every call is 'anonymous'.");
ABSL_FLAG(bool, auth_identity_from_client_cert, false,
          "With mutual TLS (--tls_client_ca_file): a call without a bearer token acts as its verified client "
          "certificate's subject common name; without either it gets UNAUTHENTICATED.");
ABSL_FLAG(std::uint64_t, quota_inflight_bytes, 0,
          "Per identity: bytes its requests in progress may hold (counted as --max_inflight_bytes counts "
          "them). Past it a request waits up to --admission_wait_ms, then gets RESOURCE_EXHAUSTED naming this "
          "flag. One request larger than the quota runs when the identity holds nothing else. 0: no quota.");
ABSL_FLAG(std::uint64_t, quota_streams, 0,
          "Per identity: AggregateStream and PutDataset calls in progress at once; one more gets "
          "RESOURCE_EXHAUSTED naming this flag. 0: no quota.");
ABSL_FLAG(std::uint64_t, quota_dataset_bytes, 0,
          "Per identity: bytes of resident datasets its uploads hold (4 KiB more per dataset), from an upload's "
          "first chunk until the dataset's memory is freed (delete, replace, expiry or eviction, once queries "
          "reading it end); an upload past it gets RESOURCE_EXHAUSTED naming this flag. 0: no quota.");
ABSL_FLAG(std::uint64_t, quota_datasets, 0,
          "Per identity: resident datasets its uploads hold (uploading or published, until freed, as "
          "--quota_dataset_bytes counts them; a replace counts until the old version is freed); one more "
          "upload gets RESOURCE_EXHAUSTED naming this flag. 0: no quota.");
ABSL_FLAG(std::uint64_t, quota_region_bytes, 0,
          "Per identity: bytes of shared-memory regions it has registered, until each is unregistered and "
          "no longer read; a registration past it gets RESOURCE_EXHAUSTED naming this flag. 0: no quota "
          "(--max_region_bytes still bounds all regions together).");
ABSL_FLAG(int, metrics_max_identities, 16,
          "Identities named in the metrics' identity label, first come first named; later ones are counted "
          "as 'other'. Calls without authentication are 'anonymous'.");
ABSL_FLAG(std::string, health_listen, "",
          "A second address serving only the gRPC health service (grpc.health.v1), in plaintext, for "
          "probes that cannot speak TLS (Kubernetes' gRPC probes). Empty: none; health is then served on "
          "--listen only.");
ABSL_FLAG(bool, reflection, true, "Serve gRPC server reflection on --listen (without authentication).");
ABSL_FLAG(int, threads, 0, "Worker threads for request work and the cpu backend; 0 means one per CPU.");
ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:9464",
          "Address of the Prometheus /metrics endpoint; empty disables it.");
ABSL_FLAG(double, drain_grace_seconds, 30,
          "On SIGTERM or SIGINT: health turns NOT_SERVING, new calls are refused, and calls in flight "
          "get this long to finish before they are cancelled; then the process exits 0. Should the "
          "stop take 5 s longer than this (a call stuck where a cancel cannot reach it), it exits 1 "
          "then; a second signal while draining exits 0 at once.");
// The cuda backend's; why each default is what it is: server/engine/cuda/tuning.h.
ABSL_FLAG(std::vector<std::string>, cuda_devices, {},
          "Comma-separated CUDA device ordinals to use; empty: every visible GPU.");
ABSL_FLAG(std::uint64_t, pinned_pool_bytes, std::uint64_t{1} << 30,
          "Pinned host staging memory, allocated once at start and split evenly over the GPUs; each "
          "lane needs 4 x --cuda_chunk_bytes.");
ABSL_FLAG(std::uint64_t, cuda_chunk_bytes, std::uint64_t{8} << 20,
          "Bytes per host-to-device copy and kernel call (multiple of 256); arrays are cut at fixed "
          "multiples of it, so results do not depend on how a client chunks its stream.");
ABSL_FLAG(int, cuda_streams_per_device, 16,
          "Lanes per GPU: requests one GPU serves at once, each with its own streams, device buffers "
          "and state.");
ABSL_FLAG(std::string, routing, "cost",
          "With --backend=cuda or auto, where received arrays run: 'cost' sends each request to the CPU "
          "or a GPU, whichever is estimated to finish it first under the present load (rates measured at "
          "start-up, see --route_model); both give the same bits (exact float sums, means and "
          "variances, --cuda_exact_sums), and a request they would answer differently (a float prod) is "
          "routed by size. 'size' sends arrays under --small_request_bytes to the CPU and the rest to a "
          "GPU. Registered host regions are routed by size either way. Every response's "
          "execution.backend says which ran.");
ABSL_FLAG(std::string, route_model, "",
          "--routing=cost: rates to use instead of the measured ones, as key=value,... with keys "
          "cpu_fixed_us, cpu_read_ns, cpu_ns.OP (what an op adds per element on one thread, e.g. "
          "cpu_ns.argmax=0.4), cpu_hist_small_ns, cpu_hist_large_ns (256 and 65536 bins), cpu_mask_ns "
          "(a validity mask's gather per element), cpu_threads, cpu_gb_per_s (all threads), gpu_fixed_us, "
          "gpu_gb_per_s (one request) and gpu_all_gb_per_s (all lanes, the rate queued bytes drain at). "
          "The start-up log prints the measured set in this form.");
ABSL_FLAG(bool, route_calibration, true,
          "--routing=cost: measure the routing rates at start-up (about 0.1 s); off: only --route_model "
          "and built-in defaults.");
ABSL_FLAG(std::string, fault_lose_gpu, "",
          "Testing only: ORDINAL@SECONDS marks that GPU lost SECONDS after start, as a sticky CUDA error "
          "would, to test losing a GPU under load: no new request goes to it, the other GPUs serve, and "
          "health (service \"cuda:ORDINAL\") and tally_device_serving report it. Empty: no fault.");
ABSL_FLAG(int, staging_copy_threads, 8,
          "With --backend=cuda or auto: threads that copy a received message into pinned staging, and "
          "group-by's answers out of it (an array each), in parallel (1: the request's own thread alone).");
ABSL_FLAG(std::uint64_t, pinned_receive_bytes, 0,
          "With --backend=cuda or auto: host memory, mapped and registered with CUDA once at start, that the "
          "allocator hands out before asking the system, so gRPC's receive slices lie in pinned memory and "
          "are copied to the GPU where they lie, with no CPU copy into staging (server/receive_arena.h). "
          "Resident (pinned) from the start, never grows; 0: off.");
ABSL_FLAG(bool, cuda_exact_sums, true,
          "With --backend=cuda or auto: float sums, and every dtype's means, sums of squares, variances "
          "and standard deviations (and their NaN-skipping forms), whole or per row, exact on the GPU as on the cpu "
          "backend: the same bits as math.fsum for a sum, and the same bits on every path (backend, "
          "chunking, shards, merges), by an exact pass that reads the data beside the fused pass when the "
          "request has other ops (docs/performance.md). false: the fused pass's float64 sums and "
          "Welford's moments (faster with other ops, last bits depend on the path; --routing=cost then "
          "routes requests with them by size).");
ABSL_FLAG(std::uint64_t, small_request_bytes, std::uint64_t{1} << 20,
          "With --backend=cuda or auto: arrays smaller than this run on the CPU where they are routed by "
          "size (--routing=size; registered host regions and float prods under --routing=cost); 0: "
          "everything so routed on the GPU.");
ABSL_FLAG(std::uint64_t, cuda_max_state_bytes, std::uint64_t{16} << 20,
          "Per-lane device memory for results (rows x ops, histograms), a request's validity mask and "
          "its offsets; a request of host bytes needing more runs on the CPU backend, one of GPU bytes "
          "(a dataset, a CUDA IPC region) is refused with RESOURCE_EXHAUSTED.");
ABSL_FLAG(std::uint64_t, cuda_pool_keep_bytes, std::uint64_t{512} << 20,
          "Device memory each GPU's pool keeps between requests of the scratch it lends per request "
          "(group-by's order of rows, the quantile passes): more spares large group-bys mapping it afresh "
          "(about 6 GiB for 2^28 rows), but is not free for datasets.");
ABSL_FLAG(int, cuda_lane_wait_ms, 2000,
          "How long a request waits for a free GPU lane before RESOURCE_EXHAUSTED.");
ABSL_FLAG(std::uint64_t, max_holistic_bytes, std::uint64_t{4} << 30,
          "Host memory that the holistic functions (quantile, median, count_distinct and the others "
          "tally.proto calls holistic) may hold, every request together: they keep a row's elements (or "
          "its distinct values) while they read it. A "
          "request that would pass it is refused with RESOURCE_EXHAUSTED naming this flag.");
ABSL_FLAG(std::uint64_t, max_groups, std::uint64_t{1} << 24,
          "GroupBy: the most groups one request may make; one that would make more is refused with "
          "RESOURCE_EXHAUSTED naming this flag. Each group holds its keys and every aggregation's values "
          "while the answer is written.");
ABSL_FLAG(std::uint64_t, max_dataset_bytes, 0,
          "Resident datasets (PutDataset): bytes they may take per GPU on the cuda backend, or in host "
          "memory on the cpu backend, each dataset charged 4 KiB beyond its bytes. An upload that does not "
          "fit is refused with RESOURCE_EXHAUSTED (or evicts, with --dataset_evict_lru). 0: no limit but "
          "the memory itself.");
ABSL_FLAG(std::uint64_t, max_datasets, 10000,
          "Resident datasets the server holds at once, published or being uploaded; one more upload gets "
          "RESOURCE_EXHAUSTED (a replace takes its old version's place). The default keeps ListDatasets "
          "under gRPC's default 4 MiB receive limit. Each dataset is also charged 4 KiB beyond its bytes "
          "against --max_dataset_bytes and --quota_dataset_bytes, what it costs the server. 0: no limit.");
ABSL_FLAG(bool, dataset_evict_lru, false,
          "When an upload does not fit under --max_dataset_bytes, evict the least recently queried "
          "datasets of that GPU (or the host) until it does, instead of refusing the upload. Only at the "
          "commit of an upload that arrived whole (a cancelled, short or refused upload evicts nothing), "
          "each eviction logged at warning; until then the datasets stay, so resident memory may reach "
          "twice the limit while uploads are in progress.");
ABSL_FLAG(int, dataset_shards, 0,
          "Resident datasets: how many shards a dataset is cut into, dealt round-robin over the GPUs "
          "(or the host). 0: one per GPU, so a query on a server with several GPUs runs on all of "
          "them at once. N: N shards (more than the GPUs puts several on one). Datasets under two "
          "shards of --dataset_min_shard_bytes get fewer.");
ABSL_FLAG(std::uint64_t, dataset_min_shard_bytes, std::uint64_t{64} << 20,
          "Resident datasets: the smallest shard worth its own launch (a GPU reads 64 MiB in about "
          "25 us, a query's fixed cost); a dataset is cut into at most bytes / this many shards.");
ABSL_FLAG(std::string, dataset_dir, "",
          "Resident datasets: a directory (a local volume, a Kubernetes PersistentVolume; created if missing) "
          "where each upload is written, with a checksum, before PutDataset answers, and each delete removes "
          "its file before DeleteDataset answers, so that a restarted server (after SIGTERM, SIGKILL or a "
          "crash) loads the same datasets at start and answers the same queries bitwise. At start every "
          "complete file is loaded under the current limits (a dataset that no longer fits is skipped with a "
          "warning naming it and the limit, and its file kept); a file cut short or changed on disk is "
          "skipped with a warning, never served, and kept as *.tally.corrupt; uploads a crash cut short are "
          "removed. One server per directory. Uploads then take as long as the disk needs. Empty (the "
          "default): datasets live only as long as the process.");
ABSL_FLAG(std::uint64_t, max_region_bytes, std::uint64_t{16} << 30,
          "Shared-memory regions (tally.v1.SharedMemory): bytes that registered host and CUDA regions may "
          "span in all. A host region stays pinned (locked in RAM) while registered, so this bounds "
          "the memory clients can lock. A registration over it is refused with RESOURCE_EXHAUSTED. "
          "0: no limit.");
ABSL_FLAG(int, max_regions, 1024,
          "Shared-memory regions registered at once (1 to 4096): each holds an open file descriptor and a "
          "mapping, so this keeps clients from exhausting either. A registration past it is "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(std::string, log_level, "info", "Log level: trace, debug, info, warn, error.");

namespace {

constexpr char kUsage[] =
    "aggregates numeric arrays sent over gRPC (tally.v1.Aggregator): sums, min/max,\n"
    "means, variances, argmin/argmax, histograms, numpy's NaN-skipping nan* ops, prod,\n"
    "count_nonzero, any, all and ptp, whole, per row or per segment, skipping missing\n"
    "values when a validity mask is given, on a GPU or the CPU.\n"
    "Arrays come inline, streamed, or from resident datasets uploaded once (PutDataset) and\n"
    "kept in GPU memory (host memory on the cpu backend) for any number of queries, or from\n"
    "shared memory a client on the same host registers once (a /dev/shm object, or CUDA IPC).\n"
    "\n"
    "  tally-server                      # GPU if present, else CPU; gRPC on :50051, metrics on :9464\n"
    "  tally-server --backend=cpu --listen=127.0.0.1:50051 --metrics_listen=\n"
    "  tally-server --flagfile=/etc/tally/flags\n"
    "\n"
    "The gRPC health service (grpc.health.v1) and server reflection are on, and stay open\n"
    "without credentials when --auth_token_file asks the Aggregator calls for tokens.\n"
    "\n"
    "  tally-server --tls_cert_file=tls.crt --tls_key_file=tls.key --auth_token_file=tokens \\\n"
    "               --health_listen=0.0.0.0:50052 --quota_streams=8";

// Signals are blocked in every thread and taken synchronously by main(),
// so no handler runs in an arbitrary thread.
sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// Every connection, region and dataset upload's stream holds a file
// descriptor; the soft limit (often 1024) is a default for interactive
// shells, not a server. Raised to the hard limit, which the administrator set.
void RaiseOpenFileLimit() {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur >= files.rlim_max) return;
  const rlim_t was = files.rlim_cur;
  files.rlim_cur = files.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &files) == 0) {
    spdlog::info("open files: soft limit raised from {} to the hard limit {}", was, files.rlim_max);
  }
}

// The drain cancels calls still in flight after the grace, but a worker
// stuck in a system call does not see a cancel, and the teardown waits for
// the workers. So the process ends anyway once the grace and a margin for
// the teardown have passed (the deployment's termination grace is 10 s over
// the drain grace), or at once on a second stop signal.
constexpr double kTeardownMarginSeconds = 5;

void EndWithinGrace(const sigset_t& stop_signals, double grace_seconds) {
  std::thread([stop_signals, grace_seconds] {
    const double limit = grace_seconds + kTeardownMarginSeconds;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
    int again = -1;
    do {  // another signal's handler (the SIGBUS guard's) may interrupt the wait
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      const timespec wait{static_cast<time_t>(left.count() / 1000000000), static_cast<long>(left.count() % 1000000000)};
      again = sigtimedwait(&stop_signals, nullptr, &wait);
    } while (again < 0 && errno == EINTR);
    if (again > 0) {
      spdlog::warn("a second stop signal while draining: exiting now");
    } else {
      spdlog::error("still stopping {} s after the stop signal (a call is stuck where no cancel reaches): "
                    "exiting now", limit);
    }
    spdlog::shutdown();
    std::_Exit(again > 0 ? 0 : 1);
  }).detach();
}

}  // namespace

int main(int argc, char** argv) {
  const sigset_t stop_signals = BlockStopSignals();
  absl::SetProgramUsageMessage(kUsage);
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_helpshort_flags = [](absl::string_view file) { return absl::EndsWith(file, "server/main.cc"); };
  usage_config.contains_help_flags = usage_config.contains_helpshort_flags;
  absl::SetFlagsUsageConfig(usage_config);
  absl::ParseCommandLine(argc, argv);

  const spdlog::level::level_enum level = spdlog::level::from_str(absl::GetFlag(FLAGS_log_level));
  spdlog::set_level(level);
  RaiseOpenFileLimit();

  tally::ServerConfig config;
  config.listen = absl::GetFlag(FLAGS_listen);
  config.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  config.health_listen = absl::GetFlag(FLAGS_health_listen);
  config.reflection = absl::GetFlag(FLAGS_reflection);
  config.metrics_max_identities = absl::GetFlag(FLAGS_metrics_max_identities);
  config.tls.cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  config.tls.key_file = absl::GetFlag(FLAGS_tls_key_file);
  config.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  config.tls.require_client_cert = absl::GetFlag(FLAGS_tls_require_client_cert);
  config.tls.refresh = std::chrono::seconds(absl::GetFlag(FLAGS_tls_refresh_seconds));
  config.auth.token_file = absl::GetFlag(FLAGS_auth_token_file);
  config.auth.identity_from_client_cert = absl::GetFlag(FLAGS_auth_identity_from_client_cert);
  config.quotas.inflight_bytes = absl::GetFlag(FLAGS_quota_inflight_bytes);
  config.quotas.streams = absl::GetFlag(FLAGS_quota_streams);
  config.quotas.dataset_bytes = absl::GetFlag(FLAGS_quota_dataset_bytes);
  config.quotas.datasets = absl::GetFlag(FLAGS_quota_datasets);
  config.quotas.region_bytes = absl::GetFlag(FLAGS_quota_region_bytes);
  config.backend.kind = absl::GetFlag(FLAGS_backend);
  config.threads = absl::GetFlag(FLAGS_threads);
  for (const std::string& d : absl::GetFlag(FLAGS_cuda_devices)) {
    int ordinal = 0;
    if (!absl::SimpleAtoi(d, &ordinal) || ordinal < 0) {
      spdlog::critical("--cuda_devices: '{}' is not a device ordinal (expected e.g. 0,1)", d);
      return 2;
    }
    config.backend.cuda_devices.push_back(ordinal);
  }
  config.backend.pinned_pool_bytes = absl::GetFlag(FLAGS_pinned_pool_bytes);
  config.backend.chunk_bytes = absl::GetFlag(FLAGS_cuda_chunk_bytes);
  config.backend.streams_per_device = absl::GetFlag(FLAGS_cuda_streams_per_device);
  config.backend.small_request_bytes = absl::GetFlag(FLAGS_small_request_bytes);
  config.backend.cuda_exact_sums = absl::GetFlag(FLAGS_cuda_exact_sums);
  config.backend.routing = absl::GetFlag(FLAGS_routing);
  config.backend.route_model = absl::GetFlag(FLAGS_route_model);
  config.backend.route_calibration = absl::GetFlag(FLAGS_route_calibration);
  config.backend.fault_lose_gpu = absl::GetFlag(FLAGS_fault_lose_gpu);
  config.backend.staging_copy_threads = absl::GetFlag(FLAGS_staging_copy_threads);
  config.backend.max_state_bytes = absl::GetFlag(FLAGS_cuda_max_state_bytes);
  config.backend.pool_keep_bytes = absl::GetFlag(FLAGS_cuda_pool_keep_bytes);
  config.backend.lane_wait = std::chrono::milliseconds(absl::GetFlag(FLAGS_cuda_lane_wait_ms));
  config.backend.max_holistic_bytes = absl::GetFlag(FLAGS_max_holistic_bytes);
  config.datasets.max_bytes_per_place = absl::GetFlag(FLAGS_max_dataset_bytes);
  config.datasets.evict_lru = absl::GetFlag(FLAGS_dataset_evict_lru);
  config.datasets.max_datasets = absl::GetFlag(FLAGS_max_datasets);
  config.datasets.shards = absl::GetFlag(FLAGS_dataset_shards);
  config.dataset_dir = absl::GetFlag(FLAGS_dataset_dir);
  config.datasets.min_shard_bytes = std::max<std::uint64_t>(1, absl::GetFlag(FLAGS_dataset_min_shard_bytes));
  if (config.datasets.shards < 0 || config.datasets.shards > 1024) {
    spdlog::critical("--dataset_shards={}: expected 0 (one per GPU) to 1024", config.datasets.shards);
    return 2;
  }
  config.max_region_bytes = absl::GetFlag(FLAGS_max_region_bytes);
  if (absl::GetFlag(FLAGS_max_regions) < 1 || absl::GetFlag(FLAGS_max_regions) > 4096) {
    spdlog::critical("--max_regions={}: expected 1 to 4096", absl::GetFlag(FLAGS_max_regions));
    return 2;
  }
  config.max_regions = absl::GetFlag(FLAGS_max_regions);
  config.service.max_unary_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  config.service.max_inflight_bytes = absl::GetFlag(FLAGS_max_inflight_bytes);
  config.service.admission_wait = std::chrono::milliseconds(absl::GetFlag(FLAGS_admission_wait_ms));
  config.service.stream_idle_timeout = std::chrono::milliseconds(absl::GetFlag(FLAGS_stream_idle_timeout_ms));
  config.service.stream_min_bytes_per_second = absl::GetFlag(FLAGS_stream_min_bytes_per_second);
  config.service.max_groups = absl::GetFlag(FLAGS_max_groups);
  config.transport.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  if (config.transport.max_concurrent_streams < 1) {
    spdlog::critical("--max_concurrent_streams: must be at least 1, got {}", config.transport.max_concurrent_streams);
    return 2;
  }
  config.transport.max_connection_idle = std::chrono::seconds(absl::GetFlag(FLAGS_max_connection_idle_seconds));
  config.transport.max_connection_age = std::chrono::seconds(absl::GetFlag(FLAGS_max_connection_age_seconds));
  config.transport.max_connection_age_grace =
      std::chrono::seconds(absl::GetFlag(FLAGS_max_connection_age_grace_seconds));
  config.transport.keepalive = std::chrono::seconds(absl::GetFlag(FLAGS_keepalive_seconds));
  config.transport.min_free_fds = std::max(0, absl::GetFlag(FLAGS_min_free_file_descriptors));
  config.transport.min_client_ping_interval =
      std::chrono::seconds(absl::GetFlag(FLAGS_min_client_ping_interval_seconds));
  const double grace = absl::GetFlag(FLAGS_drain_grace_seconds);
  if (absl::Status kept = tally::KeepLargeBuffersForReuse(); !kept.ok()) {
    spdlog::warn("allocator: {} Large buffers are mapped afresh for each request.", kept.ToString());
  }
  tally::ReceiveArena* receive_arena = nullptr;
  if (const std::uint64_t arena_bytes = absl::GetFlag(FLAGS_pinned_receive_bytes); arena_bytes > 0) {
    if (config.backend.kind == "cpu" || config.backend.kind == "null") {
      spdlog::critical("--pinned_receive_bytes: the {} backend copies nothing to a GPU; leave it 0",
                       config.backend.kind);
      return 2;
    }
    absl::StatusOr<unsigned> large_buffers = tally::LargeBufferArena();
    absl::StatusOr<tally::ReceiveArena*> arena = tally::ReceiveArena::Install(
        arena_bytes, large_buffers.ok() ? std::optional<unsigned>(*large_buffers) : std::nullopt);
    if (!arena.ok()) {
      spdlog::critical("--pinned_receive_bytes: {}", arena.status().ToString());
      return 1;
    }
    config.backend.receive_arena = (*arena)->memory();
    receive_arena = *arena;
  }

  absl::StatusOr<std::unique_ptr<tally::TallyServer>> server = tally::TallyServer::Start(config);
  if (!server.ok()) {
    spdlog::critical("tally-server could not start: {}", server.status().ToString());
    return 1;
  }
  spdlog::info(
      "tally-server listening on port {} (--listen={}); backend {} on {}; metrics {}; "
      "max_message_bytes={} max_inflight_bytes={} threads={} drain_grace_seconds={}; {}; auth {}; health port {}; "
      "allocator {}",
      (*server)->port(), config.listen, (*server)->backend().name(), (*server)->backend().device(),
      config.metrics_listen.empty() ? std::string("off") : "port " + std::to_string((*server)->metrics_port()),
      config.service.max_unary_bytes, config.service.max_inflight_bytes, config.threads, grace,
      !config.tls.enabled()                    ? "plaintext"
      : config.tls.require_client_cert         ? "mutual TLS (client certificates required)"
      : !config.tls.client_ca_file.empty()     ? "TLS (client certificates verified when sent)"
                                               : "TLS",
      config.auth.token_file.empty() && !config.auth.identity_from_client_cert ? "off" : "on",
      (*server)->health_port() == 0 ? std::string("none") : std::to_string((*server)->health_port()),
      tally::AllocatorDescription());

  if (receive_arena != nullptr && (*server)->backend().name() != "cuda") {
    spdlog::warn("--pinned_receive_bytes: the {} backend copies nothing to a GPU, so the receive arena is "
                 "plain memory here; leave it 0 on hosts without one",
                 (*server)->backend().name());
  }
  int signal = 0;
  sigwait(&stop_signals, &signal);
  spdlog::info("received {}: draining (health NOT_SERVING, up to {} s for calls in flight)",
               signal == SIGTERM ? "SIGTERM" : "SIGINT", grace);
  EndWithinGrace(stop_signals, grace);
  (*server)->Drain(std::chrono::milliseconds(static_cast<long long>(grace * 1000)));
  server->reset();
  if (receive_arena != nullptr) {
    spdlog::info("receive arena: the allocator took {} of its {} MiB", receive_arena->taken() >> 20,
                 receive_arena->memory().size() >> 20);
  }
  spdlog::info("tally-server stopped");
  return 0;
}
