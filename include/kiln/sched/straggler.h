// Straggler detection: which rank of a synchronous job is persistently slower than its peers.
//
// In a synchronous data-parallel step every rank waits for the slowest at the gradient
// collective, so step times are alike and say nothing; a rank's own work (its step time less its
// wait, "compute") is what differs. Each rank keeps a window of its last kStragglerWindow compute
// times; its typical time is the window's median (one slow step, a checkpoint or a page fault,
// moves a median little: only a rank slow on most of its recent steps stands out). Among the
// ranks, a robust z-score: z = (m - M) / s, with M the median of the ranks' medians and
// s = max(1.4826 x MAD, kStragglerScaleFloor x M): the MAD estimates the spread the way a
// standard deviation would for normal data, without letting the straggler itself inflate it,
// and the floor keeps ranks that are all alike (MAD near 0) from making noise a straggler.
// A rank with z above kStragglerZ is a straggler: 3.5 is Iglewicz and Hoaglin's cut-off for
// modified z-scores; with the floor, a rank must be more than about 35% slower than the median.
#ifndef KILN_SCHED_STRAGGLER_H_
#define KILN_SCHED_STRAGGLER_H_

#include <cstddef>
#include <vector>

namespace kiln::sched {

inline constexpr size_t kStragglerWindow = 16;
inline constexpr size_t kStragglerMinSamples = 8;  // a rank's window must hold this many
inline constexpr size_t kStragglerMinRanks = 3;    // a median of two says nothing
inline constexpr double kStragglerZ = 3.5;
// A straggler stays one until its score falls below this: a rank whose score hovers around
// kStragglerZ is one event, not one per crossing.
inline constexpr double kStragglerClearZ = 2.5;
inline constexpr double kStragglerScaleFloor = 0.1;

// Each rank's robust z-score from its window of compute times (any length; the newest
// kStragglerWindow count). NaN for every rank when fewer than kStragglerMinRanks ranks have
// kStragglerMinSamples samples, and for a rank that has fewer itself.
std::vector<double> straggler_z_scores(const std::vector<std::vector<double>>& windows);

}  // namespace kiln::sched

#endif  // KILN_SCHED_STRAGGLER_H_
