// ProcessCollector: the standard process_* metrics of Prometheus client libraries, read from
// /proc/self at scrape time. Linux only; on a read failure the affected series are left out of
// that scrape rather than reported as zero.
#ifndef KILN_OBS_PROCESS_COLLECTOR_H_
#define KILN_OBS_PROCESS_COLLECTOR_H_

#include <prometheus/client_metric.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>

#include <vector>

namespace kiln::obs {

class ProcessCollector final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

}  // namespace kiln::obs

#endif  // KILN_OBS_PROCESS_COLLECTOR_H_
