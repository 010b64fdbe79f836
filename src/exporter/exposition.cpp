#include "exporter/exposition.hpp"

#include "gpumem/printable.hpp"

#include <charconv>
#include <cmath>

namespace gpumem::exporter {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

template <class T>
void append_number(std::string& out, T value) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, ec == std::errc() ? end : buf);
}

}  // namespace

Format negotiate_format(std::string_view accept) {
  return accept.find("application/openmetrics-text") != std::string_view::npos ? Format::kOpenMetrics
                                                                                : Format::kPrometheusText;
}

const char* content_type(Format format) {
  return format == Format::kOpenMetrics ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                                        : "text/plain; version=0.0.4; charset=utf-8";
}

void ExpositionWriter::family(std::string_view name, Type type, std::string_view help) {
  name_.assign(name);
  std::string_view family_name = name;
  const char* type_name = type == Type::kCounter ? "counter" : "gauge";
  if (format_ == Format::kOpenMetrics && type == Type::kCounter) {
    if (ends_with(name, "_total")) family_name.remove_suffix(6);
    else type_name = "unknown";
  }
  out_.append("# HELP ").append(family_name).append(" ").append(help).append("\n");
  out_.append("# TYPE ").append(family_name).append(" ").append(type_name).append("\n");
  if (format_ == Format::kOpenMetrics) {
    for (std::string_view unit : {"bytes", "seconds", "ratio"})
      if (ends_with(family_name, std::string("_").append(unit)))
        out_.append("# UNIT ").append(family_name).append(" ").append(unit).append("\n");
  }
}

void ExpositionWriter::begin_sample(std::string_view labels) {
  out_.append(name_);
  if (!labels.empty()) out_.append("{").append(labels).append("}");
  out_.push_back(' ');
}

void ExpositionWriter::sample(std::string_view labels, double value) {
  begin_sample(labels);
  if (std::isnan(value)) out_.append("NaN");
  else if (std::isinf(value)) out_.append(value > 0 ? "+Inf" : "-Inf");
  else append_number(out_, value);
  out_.push_back('\n');
}

void ExpositionWriter::sample(std::string_view labels, unsigned long long value) {
  begin_sample(labels);
  append_number(out_, value);
  out_.push_back('\n');
}

void ExpositionWriter::sample(std::string_view labels, long long value) {
  begin_sample(labels);
  append_number(out_, value);
  out_.push_back('\n');
}

void ExpositionWriter::finish() {
  if (format_ == Format::kOpenMetrics) out_.append("# EOF\n");
}

void append_label(std::string& labels, std::string_view key, std::string_view value) {
  if (!labels.empty()) labels.push_back(',');
  labels.append(key).append("=\"");
  // Label values must be UTF-8, or the whole scrape is rejected (one process named with a stray byte would
  // hide every GPU): such bytes become U+FFFD.
  for (char c : valid_utf8(value)) {
    if (c == '\\') labels.append("\\\\");
    else if (c == '"') labels.append("\\\"");
    else if (c == '\n') labels.append("\\n");
    else labels.push_back(c);
  }
  labels.push_back('"');
}

}  // namespace gpumem::exporter
