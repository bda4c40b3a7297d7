// Terminal progress bar.
#include "progress_bar.h"

#include <unistd.h>

#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "tally/client/sizes.h"

namespace tally::client::tool {
namespace {

constexpr absl::Duration kQuietPeriod = absl::Seconds(1);
constexpr absl::Duration kRedrawInterval = absl::Milliseconds(100);
constexpr int kBarWidth = 30;

}  // namespace

ProgressBar::ProgressBar(std::string what, std::FILE* out)
    : what_(std::move(what)), out_(out), enabled_(::isatty(::fileno(out)) == 1), start_(absl::Now()) {}

ProgressBar::~ProgressBar() { Finish(); }

void ProgressBar::Update(std::uint64_t done, std::uint64_t total) {
  if (!enabled_ || total == 0) return;
  const absl::Time now = absl::Now();
  if (now - start_ < kQuietPeriod || now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  const double fraction = static_cast<double>(done) / static_cast<double>(total);
  const int filled = static_cast<int>(fraction * kBarWidth);
  const double rate = static_cast<double>(done) / absl::ToDoubleSeconds(now - start_);
  std::string bar(filled, '#');
  bar.resize(kBarWidth, '.');
  // \r and erase-line redraw in place; the rate is decimal GB/s like bench's.
  absl::FPrintF(out_, "\r\033[2K%s [%s] %3.0f%%  %s / %s  %.2f GB/s", what_, bar, fraction * 100.0,
                FormatBytes(done), FormatBytes(total), rate / 1e9);
  std::fflush(out_);
  drawn_ = true;
}

void ProgressBar::Finish() {
  if (!drawn_) return;
  std::fputs("\r\033[2K", out_);
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace tally::client::tool
