// At start with --dataset_dir: loads the datasets the directory holds into
// the store, before the server listens, under the limits an upload meets.
#pragma once

#include <cstdint>

#include "server/engine/datasets/dataset_directory.h"
#include "server/engine/datasets/dataset_store.h"
#include "server/frontend/identity_quota.h"

namespace tally {

struct RestoreReport {
  std::uint64_t loaded = 0;   // datasets now served
  std::uint64_t bytes = 0;    // their bytes
  std::uint64_t skipped = 0;  // files not loaded (each logged at warning)
};

// Every name's latest complete file is loaded as its uploader's upload
// would be (its bytes on the places and in the shards the current flags
// decide, charged to the owner's quotas), oldest first. Skipped, each with
// a warning naming the dataset and why: a file that fails its checks (cut
// short, changed on disk; kept aside as *.tally.corrupt, never served), and
// a dataset the limits no longer fit (--max_dataset_bytes, --max_datasets,
// the quotas; its file is kept, for a restart with room). Files of expired
// datasets and of versions a later one replaced are removed.
RestoreReport RestoreDatasets(DatasetStore& datasets, DatasetDirectory& directory, IdentityQuotas& quotas);

}  // namespace tally
