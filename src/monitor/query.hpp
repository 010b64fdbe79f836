// `gpumem query`: nvidia-smi's --query-gpu / --query-compute-apps with the same field names, headers,
// units and CSV, plus JSON. Contract: parse_* validate the whole request before any sampling (an
// unknown field throws UsageError with nvidia-smi's sentence); render_* read only the NVML values the
// requested fields need, and a field that fails prints "[N/A]" (JSON null) without touching the rest.
#pragma once
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "monitor/common.hpp"
#include "nvml/nvml.hpp"

namespace gpumem::monitor {

struct QueryFormat {
  bool json = false;
  bool header = true;
  bool units = true;
};
// "csv", "csv,noheader,nounits", "json". Throws UsageError.
QueryFormat parse_query_format(const std::string& spec);

struct QueryField;  // one entry of the field table (query.cpp)

// A validated list of fields. `apps` selects the --query-compute-apps table.
struct QueryRequest {
  struct Selected {
    const QueryField* field;
    std::string given;  // the name as typed (JSON key); the header uses the canonical name
  };
  std::vector<Selected> fields;
  bool apps = false;
};
QueryRequest parse_gpu_fields(const std::string& list);
QueryRequest parse_app_fields(const std::string& list);

// What a loop keeps between samples: values that cannot change (identity, hardware maxima, fields
// the GPU does not support) and settings re-read once a second. One-shot queries pass no cache.
class QueryCache {
 public:
  QueryCache();
  ~QueryCache();
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// One sample of every selected GPU (or of their compute processes) in the requested format.
// With JSON, one line holds the whole sample (JSON Lines when looping). GPUs whose process list
// cannot be read add a line to *warnings instead of rows.
std::string render_query(const nvml::Nvml& nvml, const std::vector<GpuRef>& gpus, const QueryRequest& req,
                         const QueryFormat& fmt, bool with_header, std::string* warnings = nullptr,
                         QueryCache* cache = nullptr);

// Field names that --help-query lists.
std::vector<std::string> gpu_field_names();
std::vector<std::string> app_field_names();
struct FieldName {
  std::string name;
  std::vector<std::string> aliases;
};
std::vector<FieldName> gpu_field_list();
std::vector<FieldName> app_field_list();
// --help-query-gpu / --help-query-compute-apps in nvidia-smi's layout.
std::string help_query_text(bool apps);

}  // namespace gpumem::monitor
