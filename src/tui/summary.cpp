#include "tui/summary.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "gpumem/printable.hpp"
#include "monitor/common.hpp"
#include "monitor/loop.hpp"
#include "tui/sample_json.hpp"
#include "tui/view.hpp"

namespace gpumem::tui {
namespace {

struct Paint {
  bool on;
  std::string operator()(const char* code, const std::string& s) const {
    return on ? std::string("\033[") + code + "m" + s + "\033[0m" : s;
  }
};

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

std::string now_text(const TopData& d) {
  std::time_t t = std::chrono::system_clock::to_time_t(d.sample.taken_at);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%a %b %d %H:%M:%S %Y", &tm);
  return buf;
}

std::optional<long long> allocator_reserved(const TopData& d, unsigned gpu) {
  auto live = d.alloc_live.find(gpu), cached = d.alloc_cached.find(gpu);
  if (live == d.alloc_live.end()) return std::nullopt;
  return live->second + (cached == d.alloc_cached.end() ? 0 : cached->second);
}

std::string short_command(const ProcRow& r) {
  if (!r.proc) return "?";
  return printable(r.proc->comm);  // any user names their process: no escape codes reach the terminal
}

}  // namespace

std::string render_summary(const TopData& d, bool color) {
  Paint p{color};
  std::string out = p("1", hostname()) + "  " + now_text(d) + "\n";
  for (const monitor::GpuSample& g : d.sample.gpus) {
    char idx[16];
    std::snprintf(idx, sizeof idx, "[%u]", g.index);
    std::string line = p("36", idx) + " ";
    std::string name = g.name.value_or("GPU");
    name.resize(std::max<size_t>(name.size(), 22), ' ');
    line += p("34", name) + " | ";
    if (!g.error.empty()) {
      out += line + p("31", g.error) + "\n";
      continue;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "%3s", g.temperature ? (std::to_string(*g.temperature) + "C").c_str() : "-");
    line += p("31", buf) + ", ";
    std::snprintf(buf, sizeof buf, "%3s %%", g.util_gpu ? std::to_string(*g.util_gpu).c_str() : "-");
    line += p("32", buf) + " | ";
    std::snprintf(buf, sizeof buf, "%6s / %6s MB", g.memory_used ? std::to_string(monitor::to_mib(*g.memory_used)).c_str() : "?",
                  g.memory_total ? std::to_string(monitor::to_mib(*g.memory_total)).c_str() : "?");
    line += p("33", buf);
    if (auto r = allocator_reserved(d, g.index)) line += " | gpumem " + short_bytes(*r);
    line += " |";
    for (const ProcRow& r : d.rows) {
      if (r.gpu != g.index || r.kind == RowKind::kNoContext) continue;
      std::string mem = r.gpu_bytes ? std::to_string(monitor::to_mib(*r.gpu_bytes)) + "M" : "?";
      std::string who = r.proc ? r.proc->user : "[gone]";
      line += " " + p("90", who) + ":" + short_command(r) + "/" + std::to_string(r.pid) + "(" + p("33", mem) + ")";
    }
    out += line + "\n";
  }
  return out;
}

nlohmann::ordered_json summary_json(const TopData& d) {
  nlohmann::ordered_json j;
  j["hostname"] = hostname();
  j["query_time"] = std::chrono::duration_cast<std::chrono::seconds>(d.sample.taken_at.time_since_epoch()).count();
  j["gpus"] = nlohmann::ordered_json::array();
  auto opt = [](const auto& v) -> nlohmann::ordered_json { return v ? nlohmann::ordered_json(*v) : nullptr; };
  for (const monitor::GpuSample& g : d.sample.gpus) {
    nlohmann::ordered_json o;
    o["index"] = g.index;
    o["name"] = opt(g.name);
    o["uuid"] = opt(g.uuid);
    o["error"] = g.error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(g.error);
    o["temperature_c"] = opt(g.temperature);
    o["utilization_gpu_percent"] = opt(g.util_gpu);
    o["memory_used_mib"] = g.memory_used ? nlohmann::ordered_json(monitor::to_mib(*g.memory_used)) : nullptr;
    o["memory_total_mib"] = g.memory_total ? nlohmann::ordered_json(monitor::to_mib(*g.memory_total)) : nullptr;
    o["allocators_reserved_bytes"] = opt(allocator_reserved(d, g.index));
    o["processes"] = nlohmann::ordered_json::array();
    for (const ProcRow& r : d.rows) {
      if (r.gpu != g.index || r.kind == RowKind::kNoContext) continue;
      nlohmann::ordered_json p;
      p["pid"] = r.pid;
      p["user"] = r.proc ? nlohmann::ordered_json(r.proc->user) : nullptr;
      p["command"] = r.proc ? nlohmann::ordered_json(r.proc->comm) : nullptr;
      p["gpu_memory_mib"] = r.gpu_bytes ? nlohmann::ordered_json(monitor::to_mib(*r.gpu_bytes)) : nullptr;
      p["allocated_bytes"] = opt(r.alloc_bytes);
      p["reserved_bytes"] = opt(r.reserved_bytes);
      p["gone"] = r.kind == RowKind::kGone;
      o["processes"].push_back(std::move(p));
    }
    j["gpus"].push_back(std::move(o));
  }
  return j;
}

int run_summary(const SummaryOptions& o) {
  monitor::Sampler sampler{monitor::SamplerOptions{}};
  Gatherer gatherer(true);
  monitor::install_stop_handlers();
  monitor::Ticker ticker{std::chrono::milliseconds(static_cast<long>(std::max(o.watch_s, 0.05) * 1000))};
  std::shared_ptr<TopData> prev;
  for (bool first = true;; first = false) {
    if (!first && !ticker.wait()) return monitor::stop_exit_code();
    auto d = std::make_shared<TopData>();
    gatherer.gather(sampler, *d, prev.get());
    prev = d;
    std::string text =
        o.json ? (o.full ? sample_json(*d) : summary_json(*d)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n" : render_summary(*d, o.color);
    if (o.watch_s > 0 && !o.json) text = (isatty(STDOUT_FILENO) ? "\033[H\033[2J" : first ? "" : "\n") + text;  // repaint in place
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
      std::fprintf(stderr, "gpumem: cannot write output: %s.\n", std::strerror(errno));
      return 1;
    }
    if (o.watch_s <= 0) return 0;
  }
}

}  // namespace gpumem::tui
