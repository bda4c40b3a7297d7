#include "server/engine/reduce_pieces.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/engine/finish.h"
#include "tally/rules/partial.h"

namespace tally {
namespace {

// 64 MiB host steps: a cancel stops a host read within a few milliseconds.
constexpr std::uint64_t kHostStepBytes = std::uint64_t{64} << 20;

void Note(const std::function<void(const char*)>& phase, const char* name) {
  if (phase) phase(name);
}

// The pieces are the plan's elements, end to end, in whole rows.
absl::Status CheckPieces(const AggregationPlan& plan, std::span<const PlacedPiece> pieces) {
  if (pieces.empty()) return absl::InvalidArgumentError("data: no pieces.");
  const std::uint64_t size = rules::SizeOf(plan.array.dtype);
  std::uint64_t at = 0;
  for (const PlacedPiece& p : pieces) {
    if (p.first != at || p.extent.size() % size != 0) {
      return absl::InvalidArgumentError(absl::StrCat("data: a piece at element ", p.first, " of ",
                                                     p.extent.size(), " bytes does not follow element ", at, "."));
    }
    at += p.extent.size() / size;
  }
  if (at != plan.array.length) {
    return absl::InvalidArgumentError(
        absl::StrCat("data: the pieces hold ", at, " of the ", plan.array.length, " elements in spec.length."));
  }
  if (plan.array.row_length != 0 && plan.array.length % plan.array.row_length != 0) {
    return absl::InvalidArgumentError(absl::StrCat("row_length: ", plan.array.row_length, " does not divide the ",
                                                   plan.array.length, " elements."));
  }
  return absl::OkStatus();
}

// Every piece into one Reduction, in order.
absl::StatusOr<AggregationResult> ReduceInOne(Backend& backend, const AggregationPlan& plan,
                                              std::span<const PlacedPiece> pieces,
                                              const std::function<bool()>& cancelled,
                                              const std::function<void(const char*)>& phase) {
  absl::StatusOr<std::unique_ptr<Reduction>> reduction = backend.Start(plan, pieces.front().extent.placement);
  if (!reduction.ok()) return reduction.status();
  Note(phase, "started");
  const std::uint64_t size = rules::SizeOf(plan.array.dtype);
  for (const PlacedPiece& piece : pieces) {
    const Extent& whole = piece.extent;
    const std::uint64_t step = whole.placement.host() ? kHostStepBytes / size * size : whole.size();
    for (std::uint64_t at = 0; at < whole.size(); at += step) {
      if (cancelled()) return CancelledByClient();
      if (absl::Status s = (*reduction)->Consume(whole.Sub(at, std::min(step, whole.size() - at))); !s.ok()) {
        return s;
      }
    }
  }
  Note(phase, "consumed");
  absl::StatusOr<AggregationResult> result = (*reduction)->Finish();
  Note(phase, "finished");
  return result;
}

// Part of a piece that one Reduction reads: whole rows, or one row's part.
struct Job {
  AggregationPlan plan;  // every op asks for its partial states
  Extent extent;
  std::uint64_t row = 0;  // the first row it contributes to
  std::uint64_t rows = 0;
};

// A job of `length` elements from `first`: one row's part (rows 0), equal
// rows of `row_length`, or `rows` segments of the plan's from `row` on.
Job MakeJob(const AggregationPlan& plan, const PlacedPiece& piece, std::uint64_t first, std::uint64_t length,
            std::uint64_t row_length, std::uint64_t row, std::uint64_t into_row, std::uint64_t segments = 0) {
  Job job;
  job.plan.array = ArraySpec{plan.array.dtype, length, row_length, nullptr,
                             SliceValidity(plan.array.validity, first, length)};
  if (segments > 0) {  // the plan's offsets from `row` on, counted from `first`
    const std::vector<std::uint64_t>& all = *plan.array.offsets;
    std::vector<std::uint64_t> own(all.begin() + static_cast<std::ptrdiff_t>(row),
                                   all.begin() + static_cast<std::ptrdiff_t>(row + segments + 1));
    for (std::uint64_t& o : own) o -= first;
    job.plan.array.offsets = std::make_shared<const std::vector<std::uint64_t>>(std::move(own));
  }
  job.plan.ops = plan.ops;
  for (OpSpec& op : job.plan.ops) {
    op.partial = true;
    // Indices count from the row's start (the array's when not segmented).
    if (rules::agg::Of(op.kind).answers_index) op.base_index += into_row;
  }
  const std::uint64_t size = rules::SizeOf(plan.array.dtype);
  job.extent = piece.extent.Sub((first - piece.first) * size, length * size);
  job.row = row;
  job.rows = segments > 0 ? segments : row_length == 0 ? 1 : length / row_length;
  return job;
}

// CutPiece for variable-length segments. Each segment goes to the piece
// that holds its first element (an empty one to the piece at whose start
// it lies, or to the last piece when it lies at the array's end), so that
// every segment is some job's.
void CutSegments(const AggregationPlan& plan, const PlacedPiece& piece, std::uint64_t end, std::vector<Job>& jobs) {
  const ArraySpec& a = plan.array;
  const std::vector<std::uint64_t>& off = *a.offsets;
  std::uint64_t at = piece.first;
  // The segment holding element `at`: the last one starting at or before
  // it that is not empty (there is one: at < length).
  std::uint64_t row = static_cast<std::uint64_t>(std::upper_bound(off.begin(), off.end(), at) - off.begin()) - 1;
  if (off[row] < at) {  // the rest of a segment begun before this piece
    const std::uint64_t stop = std::min(end, off[row + 1]);
    jobs.push_back(MakeJob(plan, piece, at, stop - at, 0, row, at - off[row]));
    at = stop;
    ++row;
  } else {
    // Empty segments at `at` come before the segment holding it.
    while (row > 0 && off[row - 1] == at) --row;
  }
  // Whole segments: those that end by `end`, and at the array's end the
  // empty ones there.
  std::uint64_t last = row;
  while (last < a.rows() && off[last + 1] <= end && (off[last] < end || end == a.length)) ++last;
  if (last > row) {
    jobs.push_back(MakeJob(plan, piece, at, off[last] - at, 0, row, 0, last - row));
    at = off[last];
    row = last;
  }
  if (at < end) jobs.push_back(MakeJob(plan, piece, at, end - at, 0, row, 0));  // a segment going on after
}

// The jobs of one piece, in element order.
void CutPiece(const AggregationPlan& plan, const PlacedPiece& piece, std::vector<Job>& jobs) {
  std::uint64_t at = piece.first;
  const std::uint64_t end = piece.first + piece.extent.size() / rules::SizeOf(plan.array.dtype);
  if (!plan.array.segmented()) {
    jobs.push_back(MakeJob(plan, piece, at, end - at, 0, 0, at));
    return;
  }
  if (plan.array.variable()) return CutSegments(plan, piece, end, jobs);
  const std::uint64_t r = plan.array.row_length;
  if (at % r != 0) {  // the rest of a row begun before this piece
    const std::uint64_t stop = std::min(end, (at / r + 1) * r);
    jobs.push_back(MakeJob(plan, piece, at, stop - at, 0, at / r, at % r));
    at = stop;
  }
  if (end - at >= r) {  // whole rows
    const std::uint64_t whole = (end - at) / r * r;
    jobs.push_back(MakeJob(plan, piece, at, whole, r, at / r, 0));
    at += whole;
  }
  if (at < end) jobs.push_back(MakeJob(plan, piece, at, end - at, 0, at / r, 0));  // a row going on after
}

// Jobs by GPU, round by round: each round starts, on every GPU with jobs
// left, its next job if a lane of that GPU is free (StartIfFree: the
// launches are asynchronous, so the GPUs work side by side), then finishes
// every job it started, giving their lanes back. Only a round that could
// start nothing waits for a lane (Start), holding none. A query never holds
// one GPU's lane while it waits for another's: when it did (each GPU's job
// started in turn, waiting), 64 clients of sharded datasets on 4 GPUs
// queued behind lanes held by queries that were themselves waiting.
absl::StatusOr<AggregationResult> ReduceAcross(Backend& backend, const AggregationPlan& asked,
                                               std::span<const PlacedPiece> pieces,
                                               const std::function<bool()>& cancelled,
                                               const std::function<void(const char*)>& phase) {
  // The ops as the dtype computes them: on integers a NaN-skipping op is its
  // plain op, which has a partial state. Messages name the ops as asked.
  AggregationPlan plan = asked;
  for (OpSpec& op : plan.ops) op = AsComputedFor(op, plan.array.dtype);
  // The shards' parts are merged from partial states; an op without them
  // would be refused at Start as a partial request, with a message about
  // partial states that nobody asked for.
  for (const OpSpec& op : plan.ops) {
    if (!rules::agg::Of(op.kind).partial_state) {
      return absl::FailedPreconditionError(absl::StrCat(
          rules::Name(op.kind), " has no partial state, so it cannot be merged across a dataset's shards: "
          "aggregate this dataset without it, or upload it in one shard."));
    }
  }
  std::vector<Job> jobs;
  for (const PlacedPiece& piece : pieces) CutPiece(plan, piece, jobs);
  std::map<int, std::deque<std::size_t>> by_device;
  for (std::size_t j = 0; j < jobs.size(); ++j) by_device[jobs[j].extent.placement.device].push_back(j);
  std::vector<AggregationResult> done(jobs.size());
  bool noted = false;
  for (;;) {
    std::vector<std::pair<std::size_t, std::unique_ptr<Reduction>>> running;
    auto launch = [&](std::size_t j, std::unique_ptr<Reduction> r) -> absl::Status {
      if (absl::Status s = r->Consume(jobs[j].extent); !s.ok()) return s;
      running.emplace_back(j, std::move(r));
      by_device[jobs[j].extent.placement.device].pop_front();
      Note(phase, "part launched");
      return absl::OkStatus();
    };
    bool left = false;
    for (const auto& [device, list] : by_device) {
      if (list.empty()) continue;
      left = true;
      if (cancelled()) return CancelledByClient();
      const std::size_t j = list.front();
      absl::StatusOr<std::unique_ptr<Reduction>> r = backend.StartIfFree(jobs[j].plan, jobs[j].extent.placement);
      if (absl::IsResourceExhausted(r.status())) continue;  // that GPU's lanes are busy: a later round
      if (!r.ok()) return r.status();
      if (absl::Status s = launch(j, std::move(*r)); !s.ok()) return s;
    }
    if (!left) break;
    if (running.empty()) {  // every GPU with jobs left is busy: wait for one, holding nothing
      const std::size_t j = std::find_if(by_device.begin(), by_device.end(), [](const auto& d) {
                              return !d.second.empty();
                            })->second.front();
      absl::StatusOr<std::unique_ptr<Reduction>> r = backend.Start(jobs[j].plan, jobs[j].extent.placement);
      if (!r.ok()) return r.status();
      if (absl::Status s = launch(j, std::move(*r)); !s.ok()) return s;
    }
    if (!noted) Note(phase, "started");
    noted = true;
    // Every GPU's last steps issued before the first is waited for: then
    // they end side by side, and finishing a part that is done costs only
    // the copy of its answer.
    for (auto& [j, r] : running) {
      if (absl::Status s = r->Seal(); !s.ok()) return s;
    }
    for (auto& [j, r] : running) {
      absl::StatusOr<AggregationResult> result = r->Finish();
      if (!result.ok()) return result.status();
      done[j] = std::move(*result);
      r.reset();  // the lane back before the next job's
      Note(phase, "part finished");
    }
  }
  Note(phase, "consumed");
  // Each row's states merged in element order, then finished as the
  // backends finish theirs.
  const DType dtype = plan.array.dtype;
  const std::uint64_t rows = plan.array.rows();
  AggregationResult out;
  out.backend = done.front().backend;
  std::vector<std::string> devices;
  for (const AggregationResult& r : done) {
    if (std::find(devices.begin(), devices.end(), r.device) == devices.end()) devices.push_back(r.device);
  }
  out.device = absl::StrJoin(devices, ", ");
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const OpSpec& op = plan.ops[i];
    std::vector<rules::PartialState> states(rows);
    if (op.kind == OpKind::kHistogram) {  // an empty segment's bins stay 0 (an empty state merges as nothing)
      for (rules::PartialState& s : states) s.histogram.counts.assign(op.histogram.bins, 0);
    }
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      auto* got = std::get_if<std::vector<rules::PartialState>>(&done[j].values[i]);
      if (got == nullptr || got->size() != jobs[j].rows) {
        return absl::InternalError(absl::StrCat("a shard's ", rules::Name(op.kind), " came back without its ",
                                                jobs[j].rows, " partial state(s)."));
      }
      for (std::uint64_t k = 0; k < jobs[j].rows; ++k) {
        rules::PartialState& into = states[jobs[j].row + k];
        into = rules::Merge(op, dtype, into, (*got)[k]);
      }
    }
    OpValues values = EmptyValues(op, dtype, rows);
    for (std::uint64_t row = 0; row < rows; ++row) {
      // Rows with no elements are refused before any work; a row whose
      // elements are all masked out is only known empty now.
      if (!op.partial && !rules::HasValue(op.kind, dtype, states[row])) {
        // No non-NaN element where one is needed (nanargmin of an all-NaN
        // row), or no element at all (min of a row all masked out).
        if (states[row].elements > 0) return AllNan(asked.NameOf(i), plan.array, row);
        return NoValidElements(asked.NameOf(i), plan.array, row);
      }
      StoreRow(op, dtype, row, std::move(states[row]), values);
    }
    out.values.push_back(std::move(values));
  }
  Note(phase, "finished");
  return out;
}

}  // namespace

absl::Status CancelledByClient() {
  return absl::CancelledError("the client cancelled the request, or its deadline passed.");
}

absl::StatusOr<AggregationResult> ReducePieces(Backend& backend, const AggregationPlan& plan,
                                               std::span<const PlacedPiece> pieces,
                                               const std::function<bool()>& cancelled,
                                               const std::function<void(const char*)>& phase) {
  if (absl::Status s = CheckPieces(plan, pieces); !s.ok()) return s;
  const bool host = std::all_of(pieces.begin(), pieces.end(),
                                [](const PlacedPiece& p) { return p.extent.placement.host(); });
  if (host || pieces.size() == 1) return ReduceInOne(backend, plan, pieces, cancelled, phase);
  return ReduceAcross(backend, plan, pieces, cancelled, phase);
}

absl::StatusOr<AggregationResult> ReducePiecesByMerging(Backend& backend, const AggregationPlan& plan,
                                                        std::span<const PlacedPiece> pieces,
                                                        const std::function<bool()>& cancelled,
                                                        const std::function<void(const char*)>& phase) {
  if (absl::Status s = CheckPieces(plan, pieces); !s.ok()) return s;
  return ReduceAcross(backend, plan, pieces, cancelled, phase);
}

}  // namespace tally
