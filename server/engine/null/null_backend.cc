#include "server/engine/null/null_backend.h"

#include <limits>

#include "server/engine/finish.h"

namespace tally {
namespace {

// Results of the shape `plan` asks for, with no information in them.
AggregationResult EmptyResults(const AggregationPlan& plan) {
  AggregationResult r;
  const std::size_t rows = plan.array.rows();
  for (const OpSpec& op : plan.ops) {
    if (op.partial) {
      r.values.push_back(EmptyValues(op, plan.array.dtype, rows));
      continue;
    }
    switch (ResultKindOf(op.kind, plan.array.dtype)) {
      case ResultKind::kDouble:
        r.values.emplace_back(std::vector<double>(rows, std::numeric_limits<double>::quiet_NaN()));
        break;
      case ResultKind::kInt64: r.values.emplace_back(std::vector<std::int64_t>(rows, 0)); break;
      case ResultKind::kUInt64: r.values.emplace_back(std::vector<std::uint64_t>(rows, 0)); break;
      case ResultKind::kHistogram:
        r.values.emplace_back(std::vector<HistogramResult>(
            rows, HistogramResult{std::vector<std::uint64_t>(op.histogram.bins, 0), 0, 0, 0}));
        break;
    }
  }
  r.backend = "null";
  r.device = "none (data discarded)";
  return r;
}

class NullReduction final : public Reduction {
 public:
  explicit NullReduction(const AggregationPlan& plan) : plan_(plan) {}
  absl::Status Consume(const Extent&) override { return absl::OkStatus(); }
  absl::Status ConsumeRuns(const HostRuns&) override { return absl::OkStatus(); }
  std::size_t element_size() const override { return rules::SizeOf(plan_.array.dtype); }
  absl::StatusOr<AggregationResult> Finish() override { return EmptyResults(plan_); }

 private:
  AggregationPlan plan_;
};

class NullBackend final : public Backend {
 public:
  std::string name() const override { return "null"; }
  std::string device() const override { return "none (data discarded)"; }
  absl::StatusOr<std::unique_ptr<Reduction>> Start(const AggregationPlan& plan,
                                                    const Placement&) override {
    return std::make_unique<NullReduction>(plan);
  }
};

}  // namespace

std::unique_ptr<Backend> MakeNullBackend() { return std::make_unique<NullBackend>(); }

}  // namespace tally
