// See topology.h.
#include "comm/topology.h"

#include <kiln/base/json.h>
#include <kiln/comm/store.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <tuple>

namespace kiln::comm {
namespace {

// The value of `key` in `labels`, or "" when the rank does not carry it.
std::string label_value(const Labels& labels, const std::string& key) {
  for (const auto& [k, v] : labels) {
    if (k == key) return v;
  }
  return "";
}

// The sort key of a rank: its label values in rank 0's key order, then its host.
std::vector<std::string> domain_key(const RankRecord& r, const std::vector<std::string>& keys) {
  std::vector<std::string> key;
  for (const std::string& k : keys)
    key.push_back(label_value(r.labels, k));
  key.push_back(r.host);
  return key;
}

std::vector<std::string> key_order(const std::vector<RankRecord>& records) {
  std::vector<std::string> keys;
  if (records.empty()) return keys;
  for (const auto& [k, v] : records[0].labels)
    keys.push_back(k);
  return keys;
}

}  // namespace

std::string record_to_json(const RankRecord& record) {
  nlohmann::json j;
  j["rank"] = record.rank;
  j["host"] = record.host;
  j["pid"] = record.pid;
  nlohmann::json labels = nlohmann::json::array();
  for (const auto& [k, v] : record.labels)
    labels.push_back({k, v});
  j["labels"] = labels;
  j["tcp_address"] = record.tcp_address;
  j["tcp_port"] = record.tcp_port;
  j["machine"] = record.machine;
  j["cpus"] = record.cpus;
  j["handoff_us"] = record.handoff_us;
  j["copy_gbps"] = record.copy_gbps;
  j["reduce_gbps"] = record.reduce_gbps;
  return j.dump();
}

namespace {
// A boot id is 36 characters and a cpulist of every CPU written out well under this.
constexpr size_t kRecordFieldCharsMax = 64 << 10;
// A measured figure above this is not one (a second per hand-off, a PB/s): refused, since every
// rank's algorithm choice depends on every record's figures.
constexpr double kRecordFigureMax = 1e6;
}  // namespace

Result<RankRecord> record_from_json(const std::string& json) {
  // A peer wrote it: bounded like every JSON text Kiln did not write itself (kiln/base/json.h).
  KILN_ASSIGN_OR_RETURN(
      nlohmann::json j,
      parse_json_bounded(json, {kStoreValueBytesMax, kJsonDepthMaxDefault}, "rank record"));
  if (!j.is_object()) return Status::invalid_argument("rank record is not a JSON object");
  RankRecord r;
  try {
    r.rank = j.at("rank").get<int>();
    r.host = j.at("host").get<std::string>();
    r.pid = j.at("pid").get<int>();
    for (const auto& pair : j.at("labels")) {
      r.labels.emplace_back(pair.at(0).get<std::string>(), pair.at(1).get<std::string>());
    }
    r.tcp_address = j.at("tcp_address").get<std::string>();
    r.tcp_port = j.at("tcp_port").get<int>();
    r.machine = j.at("machine").get<std::string>();
    r.cpus = j.at("cpus").get<std::string>();
    if (r.machine.size() > kRecordFieldCharsMax || r.cpus.size() > kRecordFieldCharsMax) {
      return Status::invalid_argument("rank record: machine or cpus longer than " +
                                      std::to_string(kRecordFieldCharsMax) + " characters");
    }
    for (auto [name, field] :
         {std::pair{"handoff_us", &r.handoff_us}, std::pair{"copy_gbps", &r.copy_gbps},
          std::pair{"reduce_gbps", &r.reduce_gbps}}) {
      *field = j.at(name).get<double>();
      if (!(*field >= 0 && *field <= kRecordFigureMax)) {
        return Status::invalid_argument(std::string("rank record: ") + name + " is not in [0, " +
                                        std::to_string(kRecordFigureMax) + "]");
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(std::string("rank record: ") + e.what());
  }
  return r;
}

Result<Labels> parse_topology(const std::string& text) {
  Labels labels;
  std::set<std::string> seen;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
      return Status::invalid_argument("topology '" + text + "': item '" + item +
                                      "' is not key=value");
    }
    const std::string key = item.substr(0, eq);
    if (!seen.insert(key).second) {
      return Status::invalid_argument("topology '" + text + "': key '" + key + "' repeats");
    }
    labels.emplace_back(key, item.substr(eq + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return labels;
}

std::vector<int> ring_order(const std::vector<RankRecord>& records) {
  const std::vector<std::string> keys = key_order(records);
  std::vector<int> order(records.size());
  for (size_t i = 0; i < records.size(); ++i)
    order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return std::make_tuple(domain_key(records[a], keys), a) <
           std::make_tuple(domain_key(records[b], keys), b);
  });
  return order;
}

int domain_crossings(const std::vector<int>& ring, const std::vector<RankRecord>& records,
                     size_t level) {
  if (ring.size() < 2) return 0;
  const std::vector<std::string> keys = key_order(records);
  auto value = [&](int rank) {
    const RankRecord& r = records[rank];
    return level < keys.size() ? label_value(r.labels, keys[level]) : r.host;
  };
  int crossings = 0;
  for (size_t i = 0; i < ring.size(); ++i) {
    if (value(ring[i]) != value(ring[(i + 1) % ring.size()])) ++crossings;
  }
  return crossings;
}

std::vector<std::vector<int>> hosts_in_ring_order(const std::vector<int>& ring,
                                                  const std::vector<RankRecord>& records) {
  std::vector<std::vector<int>> groups;
  std::vector<std::string> hosts;
  for (int rank : ring) {
    const std::string& host = records[rank].host;
    auto it = std::find(hosts.begin(), hosts.end(), host);
    if (it == hosts.end()) {
      hosts.push_back(host);
      groups.push_back({rank});
    } else {
      groups[it - hosts.begin()].push_back(rank);
    }
  }
  return groups;
}

}  // namespace kiln::comm
