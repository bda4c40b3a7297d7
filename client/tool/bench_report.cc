// `tally bench`'s report: all clients' records merged, as text or JSON.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench.h"
#include "tally/client/number_text.h"
#include "tally/client/sizes.h"
#include "tally/client/wire.h"

namespace tally::client::tool {

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0.0;
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

namespace {

double Mean(const std::vector<double>& values) {
  if (values.empty()) return 0.0;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

double Max(const std::vector<double>& sorted) { return sorted.empty() ? 0.0 : sorted.back(); }

std::string Millis(double seconds) { return absl::StrFormat("%.3f ms", seconds * 1e3); }

double Rate(double amount, double seconds) { return seconds > 0 ? amount / seconds : 0.0; }

std::string SizeText(const BenchConfig& c) {
  if (c.mode == BenchMode::kResident) {
    std::vector<std::string> sizes;
    for (std::uint64_t b : c.dataset_bytes) sizes.push_back(FormatBytes(b));
    return absl::StrCat(c.dataset_bytes.size(), c.dataset_bytes.size() == 1 ? " dataset (" : " datasets (",
                        absl::StrJoin(sizes, ", "), ")");
  }
  if (c.min_bytes == c.max_bytes) return FormatBytes(c.min_bytes);
  return absl::StrCat(FormatBytes(c.min_bytes), " to ", FormatBytes(c.max_bytes), " (log-uniform)");
}

std::string ServerText(const Summary& s) {
  if (!s.backend.empty()) return absl::StrCat(s.backend, s.device.empty() ? "" : " on ", s.device);
  if (!s.place.empty()) return absl::StrCat("datasets on ", s.place);
  return "(no successful response)";
}

void PrintText(const BenchConfig& c, const Summary& s, const ResidentSetup* resident) {
  absl::PrintF("tally bench: %d client%s x %s %s, %s, mode %s, %s\n", c.clients,
               c.clients == 1 ? "" : "s", SizeText(c), NameOf(c.dtype),
               c.mode == BenchMode::kUpload ? "PutDataset with replace" : absl::StrCat("ops ", c.ops_text),
               ModeName(c.mode),
               c.shared_channel ? "one shared connection" : "one connection per client");
  if (resident != nullptr) {
    absl::PrintF("%s %s in %.3f s (%.3f GB/s), before timing\n",
                 c.mode == BenchMode::kShm ? "shared      " : "upload      ",
                 FormatBytes(resident->upload_bytes), resident->upload_seconds,
                 Rate(resident->upload_bytes, resident->upload_seconds) / 1e9);
  }
  absl::PrintF("server       %s\n", ServerText(s));
  absl::PrintF("requests     %d ok, %d failed%s in %.3f s\n", s.ok, s.failed,
               c.verify ? absl::StrCat(", ", s.verify_failed, " wrong") : "", s.seconds);
  if (c.mode == BenchMode::kResident || c.mode == BenchMode::kShm) {
    absl::PrintF("scan rate    %.3f GB/s of %s bytes, %.1f requests/s\n", Rate(s.bytes, s.seconds) / 1e9,
                 c.mode == BenchMode::kShm ? "shared" : "resident", Rate(s.ok, s.seconds));
  } else {
    absl::PrintF("throughput   %.3f GB/s%s, %.1f requests/s\n", Rate(s.bytes, s.seconds) / 1e9,
                 c.mode == BenchMode::kUpload ? " uploaded" : "", Rate(s.ok, s.seconds));
  }
  absl::PrintF("latency      p50 %s  p99 %s  max %s  mean %s\n", Millis(Percentile(s.latency, 0.5)),
               Millis(Percentile(s.latency, 0.99)), Millis(Max(s.latency)), Millis(Mean(s.latency)));
  absl::PrintF("server time  p50 %s  p99 %s\n", Millis(Percentile(s.server, 0.5)),
               Millis(Percentile(s.server, 0.99)));
  for (const auto& [code, n] : s.failures) {
    absl::PrintF("failed       %d x %s, first: %s\n", n, absl::StatusCodeToString(code),
                 s.first_message.at(code));
  }
  if (s.verify_failed > 0) absl::PrintF("wrong        first: %s\n", s.first_verify_message);
}

void PrintJson(const BenchConfig& c, const Summary& s, const ResidentSetup* resident) {
  const auto num = [](double v) {
    return std::isfinite(v) ? DoubleText(v) : JsonQuote(DoubleText(v));
  };
  std::vector<std::string> failures;
  for (const auto& [code, n] : s.failures) {
    failures.push_back(absl::StrCat(JsonQuote(absl::StatusCodeToString(code)), ":", n));
  }
  std::string out = absl::StrCat(
      "{\"target\":", JsonQuote(c.connection.target), ",\"clients\":", c.clients,
      ",\"shared_channel\":", c.shared_channel ? "true" : "false",
      ",\"mode\":", JsonQuote(ModeName(c.mode)), ",\"dtype\":", JsonQuote(NameOf(c.dtype)),
      ",\"ops\":", JsonQuote(c.ops_text), ",\"min_bytes\":", c.min_bytes,
      ",\"max_bytes\":", c.max_bytes, ",\"row_length\":", c.row_length,
      ",\"backend\":", JsonQuote(s.backend), ",\"device\":", JsonQuote(s.device));
  if (c.mode == BenchMode::kUpload) absl::StrAppend(&out, ",\"place\":", JsonQuote(s.place));
  if (resident != nullptr) {
    std::vector<std::string> datasets;
    for (const ResidentSetup::Dataset& d : resident->datasets) {
      datasets.push_back(absl::StrCat("{\"name\":", JsonQuote(d.name), ",\"bytes\":", d.bytes,
                                      ",\"place\":", JsonQuote(d.place), "}"));
    }
    absl::StrAppend(&out, ",\"datasets\":[", absl::StrJoin(datasets, ","), "]",
                    ",\"upload\":{\"bytes\":", resident->upload_bytes,
                    ",\"seconds\":", num(resident->upload_seconds),
                    ",\"gb_per_s\":", num(Rate(resident->upload_bytes, resident->upload_seconds) / 1e9), "}");
  }
  absl::StrAppend(&out, ",\"requests\":{\"ok\":", s.ok, ",\"failed\":", s.failed);
  if (c.verify) absl::StrAppend(&out, ",\"wrong\":", s.verify_failed);
  absl::StrAppend(&out, "},\"failures\":{", absl::StrJoin(failures, ","), "}",
                  ",\"seconds\":", num(s.seconds), ",\"bytes\":", s.bytes,
                  ",\"gb_per_s\":", num(Rate(s.bytes, s.seconds) / 1e9),
                  ",\"requests_per_s\":", num(Rate(s.ok, s.seconds)),
                  ",\"latency_seconds\":{\"p50\":", num(Percentile(s.latency, 0.5)),
                  ",\"p99\":", num(Percentile(s.latency, 0.99)), ",\"max\":", num(Max(s.latency)),
                  ",\"mean\":", num(Mean(s.latency)), "}",
                  ",\"server_seconds\":{\"p50\":", num(Percentile(s.server, 0.5)),
                  ",\"p99\":", num(Percentile(s.server, 0.99)), "}}\n");
  std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace

Summary Summarize(std::vector<ClientStats>& all, double seconds) {
  Summary s;
  s.seconds = seconds;
  for (ClientStats& c : all) {
    s.latency.insert(s.latency.end(), c.latency_seconds.begin(), c.latency_seconds.end());
    s.server.insert(s.server.end(), c.server_seconds.begin(), c.server_seconds.end());
    s.bytes += c.ok_bytes;
    for (const auto& [code, n] : c.failures) {
      s.failures[code] += n;
      s.failed += n;
      s.first_message.emplace(code, c.first_message[code]);
    }
    s.verify_failed += c.verify_failures;
    if (s.first_verify_message.empty()) s.first_verify_message = c.first_verify_message;
    if (s.backend.empty() && s.place.empty()) {
      s.backend = c.backend;
      s.device = c.device;
      s.place = c.place;
    }
  }
  s.ok = s.latency.size();
  std::sort(s.latency.begin(), s.latency.end());
  std::sort(s.server.begin(), s.server.end());
  return s;
}

void PrintReport(const BenchConfig& config, const Summary& summary, const ResidentSetup* resident) {
  if (config.json) {
    PrintJson(config, summary, resident);
  } else {
    PrintText(config, summary, resident);
  }
}

}  // namespace tally::client::tool
