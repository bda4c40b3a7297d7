// The `tally` command line tool: dispatches to its subcommands.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "commands.h"

namespace {

constexpr char kUsage[] = R"(usage: tally COMMAND [flags]

Client for the tally aggregation service (gRPC tally.v1.Aggregator).

Commands:
  aggregate   send one array (.npy, raw file or random), or name a resident
              dataset, and print its aggregations (sum, min, max, mean,
              var, numpy's NaN-skipping nan* ops, quantiles, top-k,
              sketches, ...: `tally aggregate --help` lists every op),
              over the whole array (or a range of a dataset), per row,
              or per segment, skipping missing values when given a mask
  groupby     send a table (.npz, or one .npy per column) and print each
              group's aggregations: GROUP BY, pandas' groupby().agg()
  put         upload an array as a named dataset the server keeps resident
              (GPU or host memory), to aggregate many times without resending
  datasets    list the resident datasets, and each place's usage and limit
  rm          remove resident datasets
  regions     list the shared-memory regions registered on the server, or
              unregister some (tally aggregate --shm makes them)
  bench       load-test a server with concurrent clients; throughput,
              latency percentiles, failures; resident-dataset scan rates
  health      ask whether a server is serving (grpc.health.v1)
  help        this text; `tally COMMAND --help` explains a command

Flags are written --name=value or --name value. Sizes and counts take
suffixes: K, M, G, T are powers of 1000 (64M = 64000000), Ki, Mi, Gi, Ti
powers of 1024 (64Mi = 67108864). Examples:
  tally aggregate data.npy --ops sum,mean,std:1
  tally aggregate --random=64M --ops=min,max,hist:10:-1:1 --json
  tally put temps temps.npy --ttl=3600
  tally aggregate --dataset temps --range 0:1M --ops mean,max
  tally groupby sales.npz --by=customer --agg=amount:nansum,nanmean,count
  tally datasets
  tally rm temps
  tally bench --clients=8 --size=64Mi --mode=stream --duration=20
  tally bench --mode=resident --sizes=1Mi,64Mi,1Gi --clients=64 --ops=sum,max
  tally health --target=gpu-box:50051
  tally datasets --target=tally.example.com:443 --ca=ca.crt --token-file=token.txt

Every command takes --target, --tls, --ca, --cert, --key, --tls-server-name,
--token and --token-file (`tally COMMAND --help` explains them).
)";

}  // namespace

int main(int argc, char** argv) {
  using namespace tally::client::tool;
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "help" || command == "--help" || command == "-h") {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  // Each command parses its own flags, and answers its own --help.
  struct Command {
    const char* name;
    int (*run)(const std::vector<std::string>&);
  };
  const Command commands[] = {{"aggregate", RunAggregate}, {"groupby", RunGroupBy},   {"put", RunPut},
                              {"datasets", RunDatasets},
                              {"rm", RunRm},               {"regions", RunRegions}, {"bench", RunBench},
                              {"health", RunHealth}};
  for (const Command& c : commands) {
    if (command == c.name) return c.run(args);
  }
  absl::FPrintF(stderr, "tally: unknown command \"%s\"\n\n%s", command, kUsage);
  return kExitUsage;
}
