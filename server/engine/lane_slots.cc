#include "server/engine/lane_slots.h"

namespace tally {

LaneSlots::LaneSlots(const std::vector<int>& lanes) : places_(lanes.size()) {
  for (std::size_t p = 0; p < lanes.size(); ++p) {
    for (int l = lanes[p] - 1; l >= 0; --l) places_[p].free.push_back(l);  // lane 0 handed out first
  }
}

LaneSlots::Taken LaneSlots::Take(int place, std::chrono::milliseconds wait) {
  const auto start = std::chrono::steady_clock::now();
  Taken taken;
  std::unique_lock lock(mutex_);
  // Whether the wait is over: a lane was found, or nothing that would do
  // is left (every place that would do is lost).
  auto settle = [&] {
    taken.place = -1;
    bool all_lost = true;
    for (std::size_t k = 0; k < places_.size(); ++k) {
      const std::size_t p = (next_ + k) % places_.size();
      if (place >= 0 && static_cast<int>(p) != place) continue;
      const Place& at = places_[p];
      if (at.lost) continue;
      all_lost = false;
      if (!at.free.empty() &&
          (taken.place < 0 || at.free.size() > places_[static_cast<std::size_t>(taken.place)].free.size())) {
        taken.place = static_cast<int>(p);
      }
    }
    taken.outcome = taken.place >= 0 ? Outcome::kGot : all_lost ? Outcome::kLost : Outcome::kBusy;
    return taken.outcome != Outcome::kBusy;
  };
  std::condition_variable& cv =
      place >= 0 && static_cast<std::size_t>(place) < places_.size() ? *places_[place].returned : any_returned_;
  if (place >= static_cast<int>(places_.size())) {
    taken.outcome = Outcome::kLost;
  } else {
    cv.wait_for(lock, wait, settle);
  }
  taken.waited_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (taken.outcome != Outcome::kGot) {
    taken.place = -1;
    return taken;
  }
  Place& at = places_[static_cast<std::size_t>(taken.place)];
  taken.lane = at.free.back();
  at.free.pop_back();
  next_ = (static_cast<std::size_t>(taken.place) + 1) % places_.size();
  return taken;
}

void LaneSlots::Give(int place, int lane) {
  {
    std::lock_guard lock(mutex_);
    places_[static_cast<std::size_t>(place)].free.push_back(lane);
  }
  // One waiter for this place and one for any place: whichever takes the
  // lane, the other finds none and waits on (no lane is left unclaimed
  // while someone who could take it sleeps).
  places_[static_cast<std::size_t>(place)].returned->notify_one();
  any_returned_.notify_one();
}

void LaneSlots::MarkLost(int place) {
  {
    std::lock_guard lock(mutex_);
    places_[static_cast<std::size_t>(place)].lost = true;
  }
  for (Place& p : places_) p.returned->notify_all();
  any_returned_.notify_all();
}

bool LaneSlots::lost(int place) const {
  std::lock_guard lock(mutex_);
  return places_[static_cast<std::size_t>(place)].lost;
}

}  // namespace tally
