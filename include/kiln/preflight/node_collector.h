// NodeCollector: this node's health as Prometheus gauges, read from /proc at scrape time, for the
// node agent (`kiln agent`). Values that cannot be read are left out of that scrape.
//
//   kiln_node_cpus                    logical CPUs online
//   kiln_node_load1                   1-minute load average
//   kiln_node_memory_total_bytes      MemTotal
//   kiln_node_memory_available_bytes  MemAvailable
//   kiln_node_shm_free_bytes          free bytes in /dev/shm (shared-memory transport headroom)
#ifndef KILN_PREFLIGHT_NODE_COLLECTOR_H_
#define KILN_PREFLIGHT_NODE_COLLECTOR_H_

#include <prometheus/collectable.h>

#include <vector>

namespace kiln::preflight {

class NodeCollector final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace kiln::preflight

#endif  // KILN_PREFLIGHT_NODE_COLLECTOR_H_
