// `tally bench --mode=resident`: datasets uploaded once, then queried by
// every client, reporting the rate at which the server scans resident bytes;
// `--mode=shm`: the same over arrays shared through /dev/shm (AggregateRegion);
// and `--mode=upload`: PutDataset again and again, reporting its rate.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench.h"
#include "tally/client/random_data.h"
#include "tally/client/reference.h"
#include "tally/client/sizes.h"

namespace tally::client::tool {
namespace {

PutOptions UploadOptions(const BenchConfig& c) {
  PutOptions put;
  // A dataset left by an earlier run (--keep, or one cut short) must not
  // stop this one.
  put.replace = true;
  put.chunk_bytes = c.call.chunk_bytes;
  put.timeout = c.call.timeout;
  return put;
}

// Removes what the bench made, unless --keep. A failure here does not
// change the measurement, so it is reported, not counted.
void Cleanup(const BenchConfig& c, Client& client, const std::vector<std::string>& names,
             bool missing_ok) {
  if (c.keep) return;
  for (const std::string& name : names) {
    const absl::StatusOr<v1::DatasetInfo> removed = client.DeleteDataset(name, absl::Seconds(30));
    if (removed.ok() || (missing_ok && removed.status().code() == absl::StatusCode::kNotFound)) continue;
    absl::FPrintF(stderr, "tally bench: could not remove dataset %s: %s: %s\n", name,
                  absl::StatusCodeToString(removed.status().code()), removed.status().message());
  }
}

// The expected answer of every op list on every dataset, for --verify.
using Expected = std::vector<std::vector<absl::StatusOr<v1::AggregateResponse>>>;

// Uploads one dataset per --sizes entry, all prefixes of one random array.
// On failure, removes those already uploaded.
absl::StatusOr<ResidentSetup> Upload(const BenchConfig& c, Client& client, Expected* expected) {
  std::uint64_t max_elements = 0;
  for (std::uint64_t bytes : c.dataset_bytes) max_elements = std::max(max_elements, c.ElementsFor(bytes));
  HostBuffer buffer(max_elements * rules::SizeOf(c.dtype));
  FillRandom(c.dtype, c.seed, buffer.data(), max_elements);

  ResidentSetup setup;
  std::vector<std::string> names;
  const absl::Time start = absl::Now();
  for (std::size_t i = 0; i < c.dataset_bytes.size(); ++i) {
    const std::string name = absl::StrCat(c.dataset_prefix, "-", i, "-", SizeText(c.dataset_bytes[i]));
    if (c.mode == BenchMode::kShm) {
      const ArrayRef array{c.dtype, buffer.data(), c.ElementsFor(c.dataset_bytes[i]), c.row_length};
      absl::StatusOr<std::unique_ptr<SharedArray>> shared = SharedArray::Create(client, array, c.call.timeout);
      if (!shared.ok()) {
        return absl::Status(shared.status().code(), absl::StrCat("sharing ", array.size_bytes(), " bytes: ",
                                                                 shared.status().message()));
      }
      setup.datasets.push_back({(*shared)->region(), array.size_bytes(), (*shared)->info().place()});
      setup.regions.push_back(std::move(*shared));
      setup.upload_bytes += array.size_bytes();
      continue;
    }
    // Flat: rows are a query's business.
    const ArrayRef array{c.dtype, buffer.data(), c.ElementsFor(c.dataset_bytes[i]), 0};
    absl::StatusOr<v1::PutDatasetResponse> put = client.PutDataset(name, array, UploadOptions(c));
    if (!put.ok()) {
      Cleanup(c, client, names, /*missing_ok=*/true);
      return absl::Status(put.status().code(),
                          absl::StrCat("uploading ", name, " (", array.size_bytes(), " bytes): ",
                                       put.status().message()));
    }
    names.push_back(name);
    setup.datasets.push_back({name, array.size_bytes(), put->dataset().place()});
    setup.upload_bytes += array.size_bytes();
  }
  setup.upload_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (expected != nullptr) {
    for (const ResidentSetup::Dataset& d : setup.datasets) {
      const ArrayRef array{c.dtype, buffer.data(), d.bytes / rules::SizeOf(c.dtype), c.row_length};
      expected->emplace_back();
      for (const auto& aggregations : c.op_sets) expected->back().push_back(ComputeReference(array, aggregations));
    }
  }
  return setup;
}

void QueryLoop(const BenchConfig& c, int index, Client& client, const ResidentSetup& setup,
               const Expected& expected, BenchClock& clock, ClientStats& stats) {
  stats.Reserve(c.requests ? *c.requests / c.clients + 1 : 4096);
  client.WaitForConnected(absl::Seconds(10));
  clock.ArriveAndWait();
  // Every client walks all (dataset, op list) pairs, each from its own
  // starting point, so sizes and ops mix evenly whatever the run's length.
  const std::size_t datasets = setup.datasets.size();
  for (std::size_t k = static_cast<std::size_t>(index); clock.Next(); ++k) {
    const std::size_t d = k % datasets;
    const std::size_t o = k / datasets % c.op_sets.size();
    const absl::Time t0 = absl::Now();
    absl::StatusOr<v1::AggregateResponse> response =
        c.mode == BenchMode::kShm
            ? setup.regions[d]->Aggregate(c.op_sets[o], c.call.timeout, &client)
            : client.AggregateDataset(setup.datasets[d].name, std::nullopt, c.row_length, c.op_sets[o],
                                      c.call.timeout);
    const double latency = absl::ToDoubleSeconds(absl::Now() - t0);
    if (!response.ok()) {
      stats.Failed(response.status());
      continue;
    }
    stats.Ok(latency, response->execution().server_seconds(), setup.datasets[d].bytes);
    if (stats.backend.empty()) {
      stats.backend = response->execution().backend();
      stats.device = response->execution().device();
    }
    if (c.verify) {
      const absl::StatusOr<v1::AggregateResponse>& want = expected[d][o];
      const absl::Status same = want.ok() ? CompareResults(*want, *response) : want.status();
      if (!same.ok()) stats.Wrong(same);
    }
  }
}

std::string UploadName(const BenchConfig& c, int index) {
  return absl::StrCat(c.dataset_prefix, "-upload-", index);
}

void UploadLoop(const BenchConfig& c, int index, Client& client, BenchClock& clock, ClientStats& stats) {
  const std::uint64_t seed = c.seed + static_cast<std::uint64_t>(index);
  const std::uint64_t length = c.ElementsFor(c.min_bytes);
  HostBuffer buffer(length * rules::SizeOf(c.dtype));
  FillRandom(c.dtype, seed, buffer.data(), length);
  const ArrayRef array{c.dtype, buffer.data(), length, 0};
  const std::string name = UploadName(c, index);
  const PutOptions put = UploadOptions(c);
  stats.Reserve(c.requests ? *c.requests / c.clients + 1 : 1024);
  client.WaitForConnected(absl::Seconds(10));
  clock.ArriveAndWait();
  while (clock.Next()) {
    const absl::Time t0 = absl::Now();
    absl::StatusOr<v1::PutDatasetResponse> response = client.PutDataset(name, array, put);
    const double latency = absl::ToDoubleSeconds(absl::Now() - t0);
    if (!response.ok()) {
      stats.Failed(response.status());
      continue;
    }
    stats.Ok(latency, response->server_seconds(), array.size_bytes());
    if (stats.place.empty()) stats.place = response->dataset().place();
  }
}

}  // namespace

int RunResidentBench(const BenchConfig& config, std::vector<std::unique_ptr<Client>>& clients) {
  Expected expected;
  absl::StatusOr<ResidentSetup> setup = Upload(config, *clients[0], config.verify ? &expected : nullptr);
  if (!setup.ok()) {
    absl::FPrintF(stderr, "tally bench: %s: %s\n", absl::StatusCodeToString(setup.status().code()),
                  setup.status().message());
    return kExitFailure;
  }
  std::vector<ClientStats> stats;
  const double seconds = RunClients(
      config,
      [&](int i, BenchClock& clock, ClientStats& s) {
        QueryLoop(config, i, *clients[i], *setup, expected, clock, s);
      },
      stats);
  const Summary summary = Summarize(stats, seconds);
  PrintReport(config, summary, &*setup);
  std::vector<std::string> names;
  for (const ResidentSetup::Dataset& d : setup->datasets) names.push_back(d.name);
  // Shared regions go with the setup (unregistered, objects removed).
  if (config.mode != BenchMode::kShm) Cleanup(config, *clients[0], names, /*missing_ok=*/false);
  return summary.all_ok() ? kExitOk : kExitFailure;
}

int RunUploadBench(const BenchConfig& config, std::vector<std::unique_ptr<Client>>& clients) {
  std::vector<ClientStats> stats;
  const double seconds = RunClients(
      config,
      [&](int i, BenchClock& clock, ClientStats& s) { UploadLoop(config, i, *clients[i], clock, s); },
      stats);
  const Summary summary = Summarize(stats, seconds);
  PrintReport(config, summary);
  // A client whose every upload failed left nothing behind.
  std::vector<std::string> names;
  for (int i = 0; i < config.clients; ++i) names.push_back(UploadName(config, i));
  Cleanup(config, *clients[0], names, /*missing_ok=*/true);
  return summary.all_ok() ? kExitOk : kExitFailure;
}

}  // namespace tally::client::tool
