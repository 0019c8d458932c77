// See include/kiln/sched/flight_culprit.h.
#include <kiln/base/file_system.h>
#include <kiln/base/json.h>
#include <kiln/sched/flight_culprit.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <charconv>
#include <filesystem>
#include <map>
#include <string_view>
#include <system_error>

namespace kiln::sched {
namespace {

constexpr std::string_view kPrefix = "flight-rank";
constexpr std::string_view kSuffix = ".json";
// Ranks are ints; nine digits keep the parse far from overflow and cover any world size.
constexpr size_t kRankDigitsMax = 9;
// Real dumps nest three levels (object, entries array, entry).
constexpr int kDumpDepthMax = 8;

// The rank in "flight-rank<R>.json", or none for any other name.
std::optional<int> rank_of_name(std::string_view name) {
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix)) {
    return std::nullopt;
  }
  const std::string_view digits =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.empty() || digits.size() > kRankDigitsMax) return std::nullopt;
  int rank = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return rank;
}

// The whole file, or why not (the caller turns it into a warning).
Result<std::string> read_bounded(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return os_error(path, "open", errno);
  std::string text;
  Status s;
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    s = os_error(path, "fstat", errno);
  } else if (!S_ISREG(st.st_mode)) {
    s = Status::invalid_argument("not a regular file");
  } else if (static_cast<uint64_t>(st.st_size) > kFlightDumpBytesMax) {
    s = Status::invalid_argument(std::to_string(st.st_size) + " bytes, over the " +
                                 std::to_string(kFlightDumpBytesMax) + "-byte bound");
  } else {
    // One byte more than the bound: a file that grew since fstat is caught too.
    text.resize(kFlightDumpBytesMax + 1);
    size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = read(fd, text.data() + got, text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        s = os_error(path, "read", errno);
        break;
      }
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    text.resize(got);
    if (s.ok() && got > kFlightDumpBytesMax) {
      s = Status::invalid_argument("grew past the " + std::to_string(kFlightDumpBytesMax) +
                                   "-byte bound while being read");
    }
  }
  close(fd);
  if (!s.ok()) return s;
  return text;
}

// What one dump says: its rank and the culprit of its first failure that names one.
struct DumpVote {
  int reporting_rank = -1;
  std::optional<FlightCulprit> culprit;  // votes unset here
};

std::string string_or_empty(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Result<DumpVote> read_vote(const nlohmann::json& dump, int rank_from_name) {
  if (!dump.is_object()) return Status::invalid_argument("not a JSON object");
  const auto entries = dump.find("entries");
  if (entries == dump.end() || !entries->is_array()) {
    return Status::invalid_argument("no \"entries\" array: not a flight-recorder dump");
  }
  DumpVote vote;
  const auto rank = dump.find("rank");
  vote.reporting_rank =
      rank != dump.end() && rank->is_number_integer() ? rank->get<int>() : rank_from_name;
  uint64_t first_seq = UINT64_MAX;
  for (const nlohmann::json& e : *entries) {
    if (!e.is_object() || string_or_empty(e, "state") != "failed") continue;
    const auto culprit = e.find("culprit_rank");
    if (culprit == e.end() || !culprit->is_number_integer() || culprit->get<int64_t>() < 0 ||
        culprit->get<int64_t>() > INT32_MAX) {
      continue;  // -1: this failure named nobody
    }
    const auto seq_it = e.find("seq");
    const uint64_t seq =
        seq_it != e.end() && seq_it->is_number_unsigned() ? seq_it->get<uint64_t>() : UINT64_MAX;
    if (vote.culprit && seq >= first_seq) continue;
    first_seq = seq;
    FlightCulprit c;
    c.rank = culprit->get<int>();
    c.host = string_or_empty(e, "culprit_host");
    c.op = string_or_empty(e, "op");
    c.error = string_or_empty(e, "error");
    c.reporting_rank = vote.reporting_rank;
    vote.culprit = std::move(c);
  }
  return vote;
}

}  // namespace

Result<FlightDumpReport> culprit_from_flight_dumps(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) {
      return Status::not_found("flight-recorder dumps: " + dir + ": no such directory");
    }
    return Status::io_error("flight-recorder dumps: " + dir + ": " + ec.message());
  }
  FlightDumpReport report;
  // The lowest kFlightDumpFilesMax ranks, by name; the rest only counted.
  std::map<int, std::string> names;
  size_t beyond_bound = 0;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::optional<int> rank = rank_of_name(name);
    if (!rank) continue;
    names.emplace(*rank, name);
    if (names.size() > kFlightDumpFilesMax) {
      names.erase(std::prev(names.end()));
      ++beyond_bound;
    }
  }
  if (ec) {
    report.warnings.push_back(dir + ": listing stopped early: " + ec.message());
  }
  if (beyond_bound > 0) {
    report.warnings.push_back(std::to_string(beyond_bound) + " dumps beyond the lowest " +
                              std::to_string(kFlightDumpFilesMax) + " ranks were not read");
  }

  // rank named -> the culprit record of the lowest reporting rank that named it, with the count.
  std::map<int, FlightCulprit> tally;
  for (const auto& [rank, name] : names) {
    Result<std::string> text = read_bounded(dir + "/" + name);
    if (!text.ok()) {
      report.warnings.push_back(name + ": " + text.status().message());
      continue;
    }
    Result<nlohmann::json> dump =
        parse_json_bounded(*text, {kFlightDumpBytesMax, kDumpDepthMax}, name);
    if (!dump.ok()) {
      report.warnings.push_back(dump.status().message());
      continue;
    }
    Result<DumpVote> vote = read_vote(*dump, rank);
    if (!vote.ok()) {
      report.warnings.push_back(name + ": " + vote.status().message());
      continue;
    }
    ++report.dumps_read;
    if (!vote->culprit) continue;
    auto [entry, inserted] = tally.emplace(vote->culprit->rank, *vote->culprit);
    if (!inserted && vote->reporting_rank < entry->second.reporting_rank) {
      const int votes = entry->second.votes;
      entry->second = *vote->culprit;
      entry->second.votes = votes;
    }
    ++entry->second.votes;
  }
  // Most votes; the map's order makes the first of equal counts the lowest rank.
  for (const auto& [rank, c] : tally) {
    if (!report.culprit || c.votes > report.culprit->votes) report.culprit = c;
  }
  return report;
}

}  // namespace kiln::sched
