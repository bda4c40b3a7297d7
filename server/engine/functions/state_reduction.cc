#include "server/engine/functions/state_reduction.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/engine/cpu/cpu_backend.h"
#include "tally/rules/agg/registry.h"
#include "tally/rules/agg/state.h"

namespace tally {
namespace {

// Device bytes are read through a host buffer of this size: large enough
// that a copy's fixed cost is small beside its bytes, small enough to hold
// per request.
constexpr std::uint64_t kCopyStepBytes = std::uint64_t{16} << 20;

class StateReduction final : public Reduction {
 public:
  StateReduction(const AggregationPlan& plan, std::vector<std::size_t> ops, HolisticBudget* budget, CopyToHost copy)
      : array_(plan.array), budget_(budget), copy_(std::move(copy)), size_(rules::SizeOf(plan.array.dtype)) {
    for (const std::size_t i : ops) {
      Op op;
      op.position = i;
      op.name = plan.NameOf(i);
      op.spec = rules::AsComputedFor(plan.ops[i], array_.dtype);
      op.spec.partial = plan.ops[i].partial;
      op.function = &rules::agg::Of(op.spec.kind);
      if (op.spec.partial) {
        op.values = std::vector<rules::PartialState>(array_.rows());
      } else {
        op.values = std::vector<rules::agg::RowAnswer>(array_.rows());
      }
      ops_.push_back(std::move(op));
    }
  }

  ~StateReduction() override { budget_->Release(charged_); }

  std::size_t element_size() const override { return size_; }

  absl::Status Consume(const Extent& elements) override {
    if (elements.placement.host()) return ConsumeHost(elements.bytes);
    if (!copy_) {
      return absl::FailedPreconditionError(absl::StrCat(
          ops_.front().name, " reads its elements on the host, and this backend cannot copy ",
          elements.placement.Describe(), " there."));
    }
    for (std::uint64_t at = 0; at < elements.size(); at += kCopyStepBytes) {
      const std::uint64_t n = std::min(kCopyStepBytes, elements.size() - at);
      buffer_.resize(n);
      if (absl::Status s = copy_(elements.Sub(at, n), buffer_); !s.ok()) return s;
      if (absl::Status s = ConsumeHost(buffer_); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<AggregationResult> Finish() override {
    while (row_ < array_.rows()) {
      if (absl::Status s = FinishRow(); !s.ok()) return s;
    }
    if (!fault_.ok()) return fault_;
    AggregationResult result;
    for (Op& op : ops_) result.values.push_back(std::move(op.values));
    static const std::string host = HostCpuModel();
    result.backend = "cpu";
    result.device = host;
    return result;
  }

 private:
  struct Op {
    std::size_t position = 0;
    const char* name = "";
    OpSpec spec;
    const rules::agg::Function* function = nullptr;
    std::unique_ptr<rules::agg::State> state;  // the row in progress
    OpValues values;
  };

  absl::Status ConsumeHost(std::span<const std::byte> bytes) {
    const std::byte* data = bytes.data();
    std::uint64_t n = bytes.size() / size_;
    while (n > 0) {
      // Rows of no element end where they begin.
      while (row_ < array_.rows() && next_ == array_.RowStart(row_) + array_.RowLength(row_)) {
        if (absl::Status s = FinishRow(); !s.ok()) return s;
      }
      if (row_ >= array_.rows()) return absl::InvalidArgumentError("data: more elements than the spec's length.");
      const std::uint64_t start = array_.RowStart(row_);
      const std::uint64_t end = start + array_.RowLength(row_);
      const std::uint64_t take = std::min(n, end - next_);
      const rules::agg::Elements block{
          .data = data,
          .count = take,
          .first = next_ - start,
          .valid = array_.validity ? array_.validity->data() : nullptr,
          .valid_bit = next_,
      };
      for (Op& op : ops_) {
        if (!op.state) op.state = op.function->state->Init(op.spec, array_.dtype);
        op.state->Update(block);
      }
      if (array_.validity) {
        for (std::uint64_t i = 0; i < take; ++i) covered_ += block.Valid(i) ? 1 : 0;
      } else {
        covered_ += take;
      }
      data += take * size_;
      n -= take;
      next_ += take;
      if (absl::Status s = ChargeGrowth(); !s.ok()) return s;
      if (next_ == end) {
        if (absl::Status s = FinishRow(); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }

  // What the states of the row in progress hold, charged as it grows.
  absl::Status ChargeGrowth() {
    std::uint64_t held = 0;
    for (const Op& op : ops_) held += op.state ? op.state->bytes() : 0;
    if (held <= charged_) return absl::OkStatus();
    if (absl::Status s = budget_->Charge(held - charged_, ops_.front().name); !s.ok()) return s;
    charged_ = held;
    return absl::OkStatus();
  }

  // Finishes row row_ (its states, or empty ones for a row of no element)
  // and moves on. A row without a value is noted: the first such one fails
  // the request at Finish, as the other backends' do.
  absl::Status FinishRow() {
    for (Op& op : ops_) {
      std::unique_ptr<rules::agg::State> state =
          op.state ? std::move(op.state) : op.function->state->Init(op.spec, array_.dtype);
      if (auto* partials = std::get_if<std::vector<rules::PartialState>>(&op.values)) {
        rules::PartialState& p = (*partials)[row_];
        p.count = covered_;
        p.elements = covered_;
        state->Serialize(p.function_state);
        continue;
      }
      auto& answers = std::get<std::vector<rules::agg::RowAnswer>>(op.values);
      if (std::optional<std::string> none = state->Finalize(answers[row_]); none && fault_.ok()) {
        fault_ = absl::InvalidArgumentError(absl::StrCat(
            "aggregations[", op.position, "] (", op.name, "): ",
            array_.segmented() ? absl::StrCat(array_.RowWord(), " ", row_, ": ") : std::string(),
            array_.masked() && covered_ == 0 ? "no valid elements; " : "", *none));
      }
    }
    budget_->Release(charged_);
    charged_ = 0;
    covered_ = 0;
    ++row_;
    return absl::OkStatus();
  }

  const ArraySpec array_;
  HolisticBudget* budget_;
  CopyToHost copy_;
  const std::uint64_t size_;
  std::vector<Op> ops_;
  std::uint64_t row_ = 0;      // the row in progress
  std::uint64_t next_ = 0;     // the next element's index in the array
  std::uint64_t covered_ = 0;  // valid elements of the row so far
  std::uint64_t charged_ = 0;  // bytes of the budget held for the row's states
  std::vector<std::byte> buffer_;
  absl::Status fault_;
};

}  // namespace

std::unique_ptr<Reduction> MakeStateReduction(const AggregationPlan& plan, std::vector<std::size_t> ops,
                                              HolisticBudget* budget, CopyToHost copy) {
  return std::make_unique<StateReduction>(plan, std::move(ops), budget, std::move(copy));
}

}  // namespace tally
