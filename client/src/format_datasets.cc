// Text and JSON for what the server says about its resident datasets.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tally/client/format.h"
#include "tally/client/number_text.h"
#include "tally/client/sizes.h"
#include "tally/client/wire.h"

namespace tally::client {
namespace {

std::string DTypeText(v1::DType dtype) {
  const std::optional<rules::DType> known = FromWire(dtype);
  if (!known) return absl::StrCat("unknown(", static_cast<int>(dtype), ")");
  return std::string(NameOf(*known));
}

// "59s", "9m59s", "2h05m", "3d04h": two units are enough to plan by.
std::string ShortDuration(double seconds) {
  const auto s = static_cast<std::int64_t>(std::ceil(seconds));
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm", s / 3600, s % 3600 / 60);
  return absl::StrFormat("%dd%02dh", s / 86400, s % 86400 / 3600);
}

// "in 9m59s", "expired" (the server removes it within moments), or "" for a
// dataset without a TTL.
std::string ExpiryText(const v1::DatasetInfo& d, absl::Time now) {
  if (d.expires_unix_seconds() <= 0) return "";
  const double left = d.expires_unix_seconds() - absl::ToDoubleSeconds(now - absl::UnixEpoch());
  return left > 0 ? absl::StrCat("in ", ShortDuration(left)) : "expired";
}

// Columns padded to their widest cell; numbers aligned right.
class Table {
 public:
  Table(std::vector<std::string> header, std::vector<bool> right)
      : right_(std::move(right)) {
    rows_.push_back(std::move(header));
  }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

  std::string Text() const {
    std::vector<size_t> width(right_.size(), 0);
    for (const auto& row : rows_) {
      for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    }
    std::string out;
    for (const auto& row : rows_) {
      std::string line;
      for (size_t i = 0; i < row.size(); ++i) {
        const std::string pad(width[i] - row[i].size(), ' ');
        if (i > 0) line += "  ";
        line += right_[i] ? pad + row[i] : row[i] + pad;
      }
      line.erase(line.find_last_not_of(' ') + 1);
      absl::StrAppend(&out, line, "\n");
    }
    return out;
  }

 private:
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

// "1000" for a flat dataset, "40x25" for one uploaded in rows of 25.
std::string ShapeText(const v1::DatasetInfo& d) {
  if (d.row_length() == 0) return absl::StrCat(d.length());
  return absl::StrCat(d.length() / d.row_length(), "x", d.row_length());
}

std::string Percent(std::uint64_t part, std::uint64_t whole) {
  return absl::StrFormat("%.1f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

}  // namespace

std::string FormatDatasetText(const v1::DatasetInfo& d, absl::Time now) {
  const std::string expiry = ExpiryText(d, now);
  return absl::StrCat(d.name(), ": ", DTypeText(d.dtype()), ", ", d.length(), " elements (",
                      FormatBytes(d.bytes()), ")",
                      d.row_length() != 0 ? absl::StrCat(" in rows of ", d.row_length()) : "", " on ", d.place(),
                      d.shards() > 1 ? absl::StrCat(" in ", d.shards(), " shards") : "", ", version ", d.version(), ", ",
                      expiry.empty() ? "no TTL" : absl::StrCat("expires ", expiry), ", ",
                      d.queries(), d.queries() == 1 ? " query" : " queries");
}

std::string FormatDatasetsText(const v1::ListDatasetsResponse& list, absl::Time now) {
  std::string out;
  if (list.datasets().empty()) {
    out = "no datasets\n";
  } else {
    Table datasets({"NAME", "DTYPE", "SHAPE", "BYTES", "PLACE", "VERSION", "EXPIRES", "QUERIES"},
                   {false, false, true, true, false, true, false, true});
    for (const v1::DatasetInfo& d : list.datasets()) {
      const std::string expiry = ExpiryText(d, now);
      datasets.Add({d.name(), DTypeText(d.dtype()), ShapeText(d),
                    FormatBytes(d.bytes()), d.place(), absl::StrCat(d.version()),
                    expiry.empty() ? "-" : expiry, absl::StrCat(d.queries())});
    }
    out = datasets.Text();
  }
  if (!list.places().empty()) {
    Table places({"PLACE", "DATASETS", "BYTES", "LIMIT", "USED"},
                 {false, true, true, true, true});
    for (const v1::PlaceUsage& p : list.places()) {
      const bool limited = p.limit_bytes() > 0;
      places.Add({p.place(), absl::StrCat(p.datasets()), FormatBytes(p.bytes()),
                  limited ? FormatBytes(p.limit_bytes()) : "none",
                  limited ? Percent(p.bytes(), p.limit_bytes()) : "-"});
    }
    absl::StrAppend(&out, "\n", places.Text());
  }
  return out;
}

std::string DatasetJson(const v1::DatasetInfo& d) {
  return absl::StrCat("{\"name\":", JsonQuote(d.name()), ",\"dtype\":", JsonQuote(DTypeText(d.dtype())),
                      ",\"length\":", d.length(), ",\"bytes\":", d.bytes(),
                      ",\"place\":", JsonQuote(d.place()), ",\"version\":", d.version(),
                      ",\"created_unix_seconds\":", DoubleText(d.created_unix_seconds()),
                      ",\"expires_unix_seconds\":", DoubleText(d.expires_unix_seconds()),
                      ",\"queries\":", d.queries(), ",\"shards\":", std::max<std::uint32_t>(d.shards(), 1),
                      ",\"row_length\":", d.row_length(), "}");
}

std::string FormatDatasetsJson(const v1::ListDatasetsResponse& list) {
  std::string out = "{\"datasets\":[";
  for (int i = 0; i < list.datasets_size(); ++i) {
    absl::StrAppend(&out, i > 0 ? ",\n  " : "\n  ", DatasetJson(list.datasets(i)));
  }
  out += "],\n\"places\":[";
  for (int i = 0; i < list.places_size(); ++i) {
    const v1::PlaceUsage& p = list.places(i);
    absl::StrAppend(&out, i > 0 ? ",\n  " : "\n  ", "{\"place\":", JsonQuote(p.place()),
                    ",\"datasets\":", p.datasets(), ",\"bytes\":", p.bytes(),
                    ",\"limit_bytes\":", p.limit_bytes(), "}");
  }
  out += "]}\n";
  return out;
}

}  // namespace tally::client
