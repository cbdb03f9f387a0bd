// sweep_index.cpp — see sweep_index.h. JSON and CSV are written by hand (no dependency): strings
// are escaped, non-finite numbers become null (JSON) or an empty cell (CSV).
#include "sim/io/text_io.h"
#include "sim/sweep/sweep_index.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace moerl {

namespace {

const char* kFixedColumns[] = {"index", "id", "file", "status", "steps", "collapse_step",
                               "final_reward", "final_eval", "seconds", "rank"};
constexpr size_t kNumFixed = sizeof kFixedColumns / sizeof kFixedColumns[0];

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string number(double v, const char* null_text) {
  if (!std::isfinite(v)) return null_text;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// RFC 4180 records: quoted cells may hold commas, quotes ("") and newlines.
std::vector<std::vector<std::string>> csv_parse(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string cell;
  bool quoted = false, any = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') { cell += '"'; ++i; }
      else if (c == '"') quoted = false;
      else cell += c;
    } else if (c == '"') {
      quoted = true;
      any = true;
    } else if (c == ',') {
      row.push_back(cell);
      cell.clear();
      any = true;
    } else if (c == '\n') {
      row.push_back(cell);
      rows.push_back(row);
      row.clear();
      cell.clear();
      any = false;
    } else if (c != '\r') {
      cell += c;
      any = true;
    }
  }
  if (any) {
    row.push_back(cell);
    rows.push_back(row);
  }
  return rows;
}

double parse_double(const std::string& s) {
  if (s.empty()) return kSweepNaN;
  try {
    return std::stod(s);
  } catch (const std::exception&) {
    return kSweepNaN;
  }
}

}  // namespace

std::string sweep_index_json(const SweepIndex& index) {
  std::string js = "{\n  \"format\": \"moerl-sweep-index\",\n  \"version\": 1,\n";
  js += "  \"grid\": " + json_string(index.grid) + ",\n  \"base\": " + json_string(index.base) + ",\n";
  js += "  \"swept_keys\": [";
  for (size_t i = 0; i < index.swept_keys.size(); ++i) js += (i ? ", " : "") + json_string(index.swept_keys[i]);
  js += "],\n  \"runs\": [";
  for (size_t r = 0; r < index.rows.size(); ++r) {
    const SweepIndexRow& x = index.rows[r];
    js += r ? ",\n    {" : "\n    {";
    js += "\"index\": " + std::to_string(x.index) + ", \"id\": " + json_string(x.id) +
          ", \"file\": " + json_string(x.file) + ", \"status\": " + json_string(x.status) + ", \"keys\": {";
    for (size_t k = 0; k < x.keys.size(); ++k)
      js += (k ? ", " : "") + json_string(x.keys[k].first) + ": " + json_string(x.keys[k].second);
    js += "}, \"steps\": " + std::to_string(x.steps) + ", \"collapse_step\": " + std::to_string(x.collapse_step) +
          ", \"final_reward\": " + number(x.final_reward, "null") + ", \"final_eval\": " +
          number(x.final_eval, "null") + ", \"seconds\": " + number(x.seconds, "null") +
          ", \"rank\": " + std::to_string(x.rank) + ", \"error\": " + json_string(x.error) +
          ", \"scenario_hash\": " + json_string(x.scenario_hash) + "}";
  }
  js += "\n  ]\n}\n";
  return js;
}

void sweep_index_write(const std::string& dir, const SweepIndex& index) {
  const std::filesystem::path d(dir);
  text_write_atomic((d / "index.json").string(), sweep_index_json(index));
  text_write_atomic((d / "index.csv").string(), sweep_index_csv(index));
}

std::string sweep_index_csv(const SweepIndex& index) {
  std::string csv;
  for (size_t i = 0; i < kNumFixed; ++i) csv += std::string(i ? "," : "") + kFixedColumns[i];
  for (const std::string& k : index.swept_keys) csv.append(",").append(csv_cell(k));
  csv += ",error\n";
  for (const SweepIndexRow& x : index.rows) {
    csv += std::to_string(x.index) + "," + csv_cell(x.id) + "," + csv_cell(x.file) + "," + x.status + "," +
           std::to_string(x.steps) + "," + std::to_string(x.collapse_step) + "," + number(x.final_reward, "") +
           "," + number(x.final_eval, "") + "," + number(x.seconds, "") + "," + std::to_string(x.rank);
    for (const std::string& k : index.swept_keys) {
      std::string v;
      for (const auto& kv : x.keys)
        if (kv.first == k) v = kv.second;
      csv.append(",").append(csv_cell(v));
    }
    csv.append(",").append(csv_cell(x.error)).append("\n");
  }
  return csv;
}

namespace {
SweepIndex index_parse(const std::string& path, const std::string& text) {
  const auto rows = csv_parse(text);
  if (rows.empty() || rows[0].size() < kNumFixed + 1 || rows[0][0] != "index" || rows[0].back() != "error")
    throw std::invalid_argument(path + ": not a moerl sweep index");
  SweepIndex idx;
  const std::vector<std::string>& head = rows[0];
  idx.swept_keys.assign(head.begin() + kNumFixed, head.end() - 1);
  for (size_t r = 1; r < rows.size(); ++r) {
    const std::vector<std::string>& c = rows[r];
    if (c.size() != head.size())
      throw std::invalid_argument(path + ": row " + std::to_string(r) + " has " + std::to_string(c.size()) +
                                  " cells, the header " + std::to_string(head.size()));
    SweepIndexRow x;
    x.index = std::stoi(c[0]);
    x.id = c[1];
    x.file = c[2];
    x.status = c[3];
    x.steps = std::stoll(c[4]);
    x.collapse_step = std::stoll(c[5]);
    x.final_reward = parse_double(c[6]);
    x.final_eval = parse_double(c[7]);
    x.seconds = parse_double(c[8]);
    x.rank = std::stoi(c[9]);
    for (size_t k = 0; k < idx.swept_keys.size(); ++k) x.keys.push_back({idx.swept_keys[k], c[kNumFixed + k]});
    x.error = c.back();
    idx.rows.push_back(x);
  }
  return idx;
}

std::string file_text(const std::string& path, const std::string& missing) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(missing);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

constexpr char kPlanHead[] = "# moerl sweep plan: the runs of the grid, one row each (docs/sweeps.md)\n";
}  // namespace

SweepIndex sweep_index_read(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "index.csv").string();
  return index_parse(path, file_text(path, dir + ": no sweep index (index.csv)"));
}

std::string sweep_plan_path(const std::string& dir) { return (std::filesystem::path(dir) / "plan.csv").string(); }

std::string sweep_plan_text(const SweepIndex& index) {
  SweepIndex plan;
  plan.swept_keys = index.swept_keys;
  for (const SweepIndexRow& r : index.rows) {
    SweepIndexRow p;
    p.index = r.index;
    p.id = r.id;
    p.file = r.file;
    p.keys = r.keys;
    p.status = "pending";
    plan.rows.push_back(p);
  }
  return kPlanHead + ("# grid: " + index.grid + "\n# base: " + index.base + "\n") + sweep_index_csv(plan);
}

SweepIndex sweep_plan_read(const std::string& dir) {
  const std::string path = sweep_plan_path(dir);
  std::string text = file_text(path, dir + ": no sweep plan (plan.csv)");
  SweepIndex idx;
  while (text.rfind("# ", 0) == 0) {  // the header lines
    const size_t e = text.find('\n');
    const std::string line = text.substr(0, e);
    if (line.rfind("# grid: ", 0) == 0) idx.grid = line.substr(8);
    if (line.rfind("# base: ", 0) == 0) idx.base = line.substr(8);
    text = e == std::string::npos ? "" : text.substr(e + 1);
  }
  SweepIndex rows = index_parse(path, text);
  idx.swept_keys = rows.swept_keys;
  idx.rows = rows.rows;
  return idx;
}

namespace {
// Whether dir holds this plan (false: none there); throws when it holds another. The runs (rows)
// must agree; the header (the grid's path as given) may differ between tasks.
bool same_plan_there(const std::string& dir, const SweepIndex& index, const std::string& text) {
  const std::string path = sweep_plan_path(dir);
  const auto rows_of = [](const std::string& t) {
    size_t p = 0;
    while (t.compare(p, 2, "# ") == 0) p = t.find('\n', p) + 1;
    return t.substr(p);
  };
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return false;
  if (rows_of(file_text(path, path + ": cannot be read")) == rows_of(text)) return true;
  throw std::invalid_argument(dir + ": holds the sweep of another grid (plan.csv lists other runs than " +
                              (index.grid.empty() ? std::string("this grid") : index.grid) +
                              " with these options); choose another --out");
}
}  // namespace

void sweep_plan_check(const std::string& dir, const SweepIndex& index) {
  same_plan_there(dir, index, sweep_plan_text(index));
}

void sweep_plan_publish(const std::string& dir, const SweepIndex& index) {
  const std::string path = sweep_plan_path(dir), text = sweep_plan_text(index);
  if (same_plan_there(dir, index, text)) return;
  // Tasks of one array may get here together: each writes the same text under its own temporary
  // name and renames it, so the file is always whole and always the same. A task on another node
  // may take this one's temporary for a dead process's and remove it: then the other's rename
  // has published the plan.
  try {
    text_write_atomic(path, text);
  } catch (const std::runtime_error&) {
    if (!same_plan_there(dir, index, text)) throw;
  }
}

std::string sweep_index_table(const SweepIndex& index) {
  size_t w = 4;
  for (const SweepIndexRow& x : index.rows) w = std::max(w, x.id.size());
  w = std::min<size_t>(w, 40);
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-*s %-10s %6s %9s %7s %8s  %s\n", static_cast<int>(w), "run", "status", "steps",
                "reward", "eval", "seconds", "keys / error");
  out += buf;
  // every state counted by its name (an unknown one, from a foreign index, as itself is not lost:
  // the rows say it)
  constexpr int kStates = 9;
  int counts[kStates] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  const char* names[kStates] = {"complete", "collapsed", "failed",     "preempted", "running",
                                "pending",  "unreadable", "mismatched", "unplanned"};
  for (const SweepIndexRow& x : index.rows) {
    std::string keys;
    for (const auto& [k, v] : x.keys) keys += (keys.empty() ? "" : " ") + k + "=" + v;
    if (!x.error.empty()) {
      std::string e = x.error.substr(0, x.error.find('\n'));
      keys += "  error: " + (e.size() > 160 ? e.substr(0, 160) + "…" : e);
    }
    std::string status = x.status;
    if (x.collapse_step >= 0) status.append("@").append(std::to_string(x.collapse_step));
    std::snprintf(buf, sizeof buf, "%-*s %-10s %6lld %9.3f %7.3f %8.1f  %s\n", static_cast<int>(w),
                  x.id.substr(0, w).c_str(), status.c_str(), static_cast<long long>(x.steps), x.final_reward,
                  x.final_eval, x.seconds, keys.c_str());
    out += buf;
    for (int i = 0; i < kStates; ++i)
      if (x.status == names[i]) ++counts[i];
  }
  std::string tally;
  for (int i = 0; i < kStates; ++i)
    if (counts[i]) tally += (tally.empty() ? "" : ", ") + std::to_string(counts[i]) + " " + names[i];
  out += std::to_string(index.rows.size()) + " runs: " + tally + "\n";
  return out;
}

}  // namespace moerl
