// The link matrix's plan and judgement (kiln/preflight/links.h).
#include <kiln/preflight/links.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <utility>

namespace kiln::preflight {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  return (hi + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
}

std::string figure(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), v >= 100 ? "%.0f" : v >= 1 ? "%.2f" : "%.3f", v);
  return buf;
}

LinkPair ordered(int x, int y) {
  return x < y ? LinkPair{x, y} : LinkPair{y, x};
}

}  // namespace

std::vector<std::vector<LinkPair>> plan_link_rounds(int nodes, int random_rounds, uint64_t seed) {
  std::vector<std::vector<LinkPair>> rounds;
  if (nodes < 2) return rounds;
  if (nodes == 2) {
    rounds.push_back({{0, 1}});
    return rounds;
  }
  // Ring neighbours: (i, i+1) for even i, then odd i with the wrap (N-1, 0) when N is even (0 is
  // free in that round); when N is odd the wrap needs a round of its own.
  std::vector<LinkPair> even, odd;
  for (int i = 0; i + 1 < nodes; ++i)
    (i % 2 == 0 ? even : odd).push_back({i, i + 1});
  if (nodes % 2 == 0) {
    odd.push_back(ordered(nodes - 1, 0));
  }
  rounds.push_back(std::move(even));
  if (!odd.empty()) rounds.push_back(std::move(odd));
  if (nodes % 2 == 1) rounds.push_back({ordered(nodes - 1, 0)});
  // Random matchings: a seeded Fisher-Yates shuffle (the same plan for the same seed on any
  // machine), paired in order.
  std::mt19937_64 rng(seed);
  std::vector<int> order(static_cast<size_t>(nodes));
  for (int i = 0; i < nodes; ++i)
    order[static_cast<size_t>(i)] = i;
  for (int r = 0; r < random_rounds; ++r) {
    for (size_t i = order.size() - 1; i > 0; --i) {
      const size_t j = static_cast<size_t>(rng() % (i + 1));
      std::swap(order[i], order[j]);
    }
    std::vector<LinkPair> round;
    for (size_t i = 0; i + 1 < order.size(); i += 2)
      round.push_back(ordered(order[i], order[i + 1]));
    std::sort(round.begin(), round.end(),
              [](const LinkPair& x, const LinkPair& y) { return x.a < y.a; });
    rounds.push_back(std::move(round));
  }
  return rounds;
}

std::vector<Finding> judge_links(const std::vector<std::string>& names,
                                 const std::vector<LinkMeasurement>& measured,
                                 const LinkThresholds& t) {
  std::vector<Finding> out;
  if (measured.empty()) return out;
  std::vector<double> bw, lat;
  for (const LinkMeasurement& m : measured) {
    bw.push_back(m.gbps);
    lat.push_back(m.latency_us);
  }
  const double bw_median = median(bw);
  const double lat_median = median(lat);
  double bw_min = t.bandwidth_fraction * bw_median;
  std::string bw_against = "median " + figure(bw_median);
  if (t.floor_gbps > bw_min) {
    bw_min = t.floor_gbps;
    bw_against = "lock floor";
  }
  const double lat_max = std::max(t.latency_factor * lat_median, t.latency_min_us);
  auto name = [&](int i) {
    return i >= 0 && static_cast<size_t>(i) < names.size() ? names[static_cast<size_t>(i)]
                                                           : "node" + std::to_string(i);
  };
  auto slow_bw = [&](const LinkMeasurement& m) { return m.gbps < bw_min; };
  auto slow_lat = [&](const LinkMeasurement& m) { return m.latency_us > lat_max; };

  // A node slow against every peer it met (two at least) is the node's fault, not its links'.
  std::map<int, std::set<int>> peers, slow_peers;
  std::map<int, std::vector<double>> node_bw;
  for (const LinkMeasurement& m : measured) {
    for (const auto& [x, y] : {std::pair{m.a, m.b}, std::pair{m.b, m.a}}) {
      peers[x].insert(y);
      node_bw[x].push_back(m.gbps);
      if (slow_bw(m) || slow_lat(m)) slow_peers[x].insert(y);
    }
  }
  std::set<int> slow_nodes;
  for (const auto& [node, met] : peers)
    if (met.size() >= 2 && slow_peers[node].size() == met.size()) slow_nodes.insert(node);
  for (int node : slow_nodes) {
    out.push_back({name(node), "links." + name(node) + ".gbps",
                   ">= " + figure(bw_min) + " with every peer",
                   figure(median(node_bw[node])) + " (median of " +
                       std::to_string(peers[node].size()) + " peers, all slow)",
                   bw_against, "links"});
  }
  // Any other slow pair is a link: named with both ends, a finding on each.
  std::set<std::pair<int, int>> named;
  for (const LinkMeasurement& m : measured) {
    if (!slow_bw(m) && !slow_lat(m)) continue;
    if (slow_nodes.count(m.a) != 0 || slow_nodes.count(m.b) != 0) continue;
    const LinkPair p = ordered(m.a, m.b);
    if (!named.insert({p.a, p.b}).second) continue;
    const std::string link = "links." + name(p.a) + "~" + name(p.b);
    for (int end : {p.a, p.b}) {
      if (slow_bw(m)) {
        out.push_back({name(end), link + ".gbps", ">= " + figure(bw_min), figure(m.gbps),
                       bw_against, "links"});
      }
      if (slow_lat(m)) {
        out.push_back({name(end), link + ".latency_us", "<= " + figure(lat_max),
                       figure(m.latency_us), "median " + figure(lat_median), "links"});
      }
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Finding& x, const Finding& y) { return x.node < y.node; });
  return out;
}

LinkCheckCost link_check_cost(int nodes, int random_rounds, double seconds_per_round) {
  LinkCheckCost c;
  if (nodes < 2) return c;
  const auto rounds = plan_link_rounds(nodes, random_rounds, 1);
  c.rounds = static_cast<int>(rounds.size());
  for (const auto& r : rounds)
    c.pairs += static_cast<int64_t>(r.size());
  c.all_pairs = int64_t{nodes} * (nodes - 1) / 2;
  c.seconds = c.rounds * seconds_per_round;
  return c;
}

}  // namespace kiln::preflight
