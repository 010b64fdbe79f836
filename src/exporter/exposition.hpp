// Writing the Prometheus text format (version 0.0.4) and OpenMetrics 1.0.0 text. Contract: a family's
// header (HELP, TYPE, UNIT) is written once, then all its samples, so families never interleave.
// Differences between the two formats live only here: OpenMetrics names a counter family without its
// `_total` suffix, has a UNIT line, and ends with "# EOF"; a counter whose name lacks `_total`
// (dcgm-exporter's DCGM_FI_* counters keep their names for existing dashboards) is typed `unknown`
// there, since OpenMetrics would otherwise rename its samples.
#pragma once
#include <string>
#include <string_view>

namespace gpumem::exporter {

enum class Format { kPrometheusText, kOpenMetrics };

// The format a scrape's Accept header asks for: OpenMetrics only when it names
// application/openmetrics-text (as Prometheus does when it prefers it), otherwise the text format.
Format negotiate_format(std::string_view accept);
const char* content_type(Format format);

enum class Type { kGauge, kCounter };

class ExpositionWriter {
 public:
  ExpositionWriter(Format format, std::string& out) : format_(format), out_(out) {}

  void family(std::string_view name, Type type, std::string_view help);
  // labels: already rendered `key="value",...` (see append_label), may be empty.
  void sample(std::string_view labels, double value);
  void sample(std::string_view labels, unsigned long long value);
  void sample(std::string_view labels, long long value);
  void finish();  // OpenMetrics' "# EOF"

 private:
  void begin_sample(std::string_view labels);
  Format format_;
  std::string& out_;
  std::string name_;
};

// Appends `key="value"` (with a leading comma when `labels` is not empty), escaping the value.
void append_label(std::string& labels, std::string_view key, std::string_view value);

}  // namespace gpumem::exporter
