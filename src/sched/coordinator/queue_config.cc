// Reading `kiln serve --queues FILE.yaml`. See queue_config.h.
#include <kiln/sched/queue_config.h>

#include <kiln/base/config.h>

namespace kiln::sched {
namespace {

bool plain(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      return false;
  return true;
}

void read_vectors(ConfigReader section, std::map<std::string, QuotaVector>* out, int64_t unnamed) {
  for (const std::string& pool : section.keys()) {
    if (!plain(pool)) section.report(pool, "pool '" + pool + "' is not a plain name");
    QuotaVector v{unnamed, unnamed, unnamed};
    section.section(pool)
        .read_int("nodes", &v.nodes, 0, int64_t{1} << 40)
        .read_int("cpus", &v.cpus, 0, int64_t{1} << 40)
        .read_int("gpus", &v.gpus, 0, int64_t{1} << 40);
    (*out)[pool] = v;
  }
}

Result<std::vector<QueueSpec>> from_document(const ConfigDocument& doc) {
  ConfigReader queues = doc.root().section("queues", kRequired);
  std::vector<QueueSpec> out;
  for (const std::string& name : queues.keys()) {
    if (out.size() >= kQueuesMax) {
      queues.report(name, "more than " + std::to_string(kQueuesMax) + " queues");
      break;
    }
    if (!plain(name)) queues.report(name, "queue '" + name + "' is not a plain name");
    QueueSpec q;
    q.name = name;
    ConfigReader r = queues.section(name);
    r.read_string("team", &q.team)
        .read_string("cohort", &q.cohort)
        .read_double("weight", &q.weight, 1e-6, 1e6);
    if (q.team.empty()) q.team = name;
    read_vectors(r.section("quota"), &q.quota, -1);
    read_vectors(r.section("borrow"), &q.borrow, 0);
    if (!q.borrow.empty() && q.cohort.empty()) {
      r.report("borrow", "borrowing needs a cohort to borrow from");
    }
    out.push_back(std::move(q));
  }
  // Fair share is per team: one team, one weight.
  for (size_t i = 0; i < out.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (out[i].team == out[j].team && out[i].weight != out[j].weight) {
        queues.report(out[i].name, "team " + out[i].team + " has weight " +
                                       std::to_string(out[j].weight) + " in queue " + out[j].name +
                                       "; one team has one weight");
      }
    }
  }
  KILN_RETURN_IF_ERROR(doc.finish());
  if (out.empty()) {
    return Status::invalid_argument(doc.source_name() + ": 'queues' names no queue");
  }
  return out;
}

}  // namespace

Result<std::vector<QueueSpec>> parse_queue_config(std::string_view yaml,
                                                  const std::string& source_name) {
  KILN_ASSIGN_OR_RETURN(ConfigDocument doc, ConfigDocument::parse(yaml, source_name));
  return from_document(doc);
}

Result<std::vector<QueueSpec>> load_queue_config(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(ConfigDocument doc, ConfigDocument::load_file(path));
  return from_document(doc);
}

}  // namespace kiln::sched
