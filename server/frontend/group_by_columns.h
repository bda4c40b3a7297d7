// The parts of a group-by call that both of its ways in share (GroupBy's
// one message, GroupByStream's chunks): the stored columns held and read
// where they lie, what the call holds while it runs, the grouping itself,
// and the answer's pages.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/backend.h"
#include "server/engine/datasets/dataset_store.h"
#include "server/engine/grouping/grouped_reduction.h"
#include "server/engine/regions/region_registry.h"
#include "server/frontend/group_convert.h"
#include "tally/v1/tally.pb.h"

namespace tally {

// The columns that name resident datasets or regions: the datasets and
// regions held (a delete, replace or unregister waits for this request),
// each read where it lies when it is one piece, and a sharded dataset's
// pieces copied together into host memory, once the request is admitted
// with those copies counted (CopyShardedColumns). A streamed table's
// columns join them in `bytes` once they have arrived.
struct StoredColumns {
  std::vector<std::shared_ptr<const Dataset>> held;
  std::vector<std::shared_ptr<const Region>> regions;
  std::vector<std::vector<std::byte>> copies;
  std::vector<std::optional<ColumnBytes>> bytes;  // by column index
  std::uint64_t first_rows = 0;                   // columns[0]'s rows, when it is stored
  // Sharded datasets still to be copied, by column index, and their bytes.
  std::vector<std::pair<int, std::shared_ptr<const Dataset>>> sharded;
  std::uint64_t to_copy = 0;

  // Whether every region read is still whole (a host region's object
  // truncated while it was read makes what was read worthless).
  absl::Status Intact() const;
};

// Holds the request's dataset and region columns (NOT_FOUND for an unknown
// name, INVALID_ARGUMENT naming columns[i] for a place past a region's end).
// Never waits.
[[nodiscard]] absl::StatusOr<StoredColumns> HoldStoredColumns(const v1::GroupByRequest& request,
                                                              DatasetStore& datasets, RegionRegistry& regions);

// The sharded datasets' pieces copied together into host memory.
[[nodiscard]] absl::Status CopyShardedColumns(StoredColumns& stored, Backend& backend);

// What a group-by holds while it runs besides its columns: per row a group
// number and a place in group order (12 bytes), and one value column laid
// out by group at a time (at most 8 bytes a row). Composite keys add, while
// the groups are found, each row's mixed-radix number (8 bytes) and the
// next column's codes (4). The tables that code the keys grow with the
// distinct keys, not the rows, and are not counted.
std::uint64_t GroupByWorkingBytes(std::uint64_t rows, int keys);

// A grouped table: its plan (whose spans point into the request and the
// stored columns) and its groups.
struct GroupedTable {
  GroupByPlan plan;
  grouping::GroupedResult result;
};

// Plans `request` over `stored` and groups it on `backend`; `ops` receives
// the plan's ops once it is made (for the call's record), `phase` the
// engine's steps. Regions read are checked whole afterwards.
[[nodiscard]] absl::StatusOr<GroupedTable> GroupTable(const v1::GroupByRequest& request, const StoredColumns& stored,
                                                      Backend& backend, const RequestLimits& limits,
                                                      std::uint64_t max_groups,
                                                      const std::function<void(std::vector<rules::OpKind>)>& ops,
                                                      const std::function<void(const char*)>& phase);

// The answer's messages, one at a time: groups [first_group, first_group +
// n) in each, at least one message (an answer of no groups has one), the
// last carrying the execution.
class GroupPages {
 public:
  // `request` must outlive this object; `server_seconds` is the call's
  // time from its arrival to the answer computed.
  GroupPages(const v1::GroupByRequest& request, GroupedTable table, double server_seconds);

  // The next message; false once every group has been given.
  bool Next(v1::GroupByResponse* message);

  std::uint64_t rows() const { return table_.plan.rows; }

 private:
  const v1::GroupByRequest& request_;
  GroupedTable table_;
  double server_seconds_;
  std::uint64_t per_message_;
  bool written_ = false;
  std::uint64_t next_ = 0;
};

}  // namespace tally
