// Prints the scrape of a tally::Metrics that has recorded one of everything,
// GPU families included: what the dashboard and alert checks compare against
// when no tally-server (or no GPU) is at hand.
#include <array>
#include <iostream>

#include "server/metrics/metrics.h"

int main() {
  tally::Metrics m({.backend = "cuda", .device = "sample GPU (0)", .version = "sample"});
  constexpr std::array ops = {tally::rules::OpKind::kSum, tally::rules::OpKind::kHistogram};
  for (const auto method : {tally::Metrics::Method::kAggregate,
                            tally::Metrics::Method::kAggregateStream}) {
    m.RequestStarted(method);
    m.RequestFinished(method, ops, 0, 0.002);
    m.RequestStarted(method);
    m.RequestFinished(method, ops, 3, 0.0001);
  }
  const int alice = m.IdentitySlot("alice");
  m.RequestStarted(tally::Metrics::Method::kAggregate);
  m.RequestFinished(tally::Metrics::Method::kAggregate, ops, 8, 0.001, alice);
  m.QuotaRejected("--quota_inflight_bytes");
  m.AdmissionRejected();
  m.BytesReceived(4096);
  m.BytesReceived(4096, alice);
  m.ElementsProcessed(1024);
  m.InFlightBytes(4096);
  m.QueueWait(0.0005);
  m.HostToDevice(0, 4096, 0.0001);
  m.KernelTime(0, 0.00005);
  m.SetDeviceMemory(0, "sample GPU", 1 << 20, 1 << 30);
  m.SetDeviceServing("cuda:0", true);
  m.DatasetEvicted();
  m.SetPinnedPool(1 << 26, 1 << 12);
  m.SetResidentDatasets("cuda:0", 1 << 30, 1, 0);
  std::cout << m.Scrape();
  return 0;
}
