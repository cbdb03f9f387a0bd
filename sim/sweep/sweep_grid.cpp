// sweep_grid.cpp — see sweep_grid.h. Boost.Program_options tokenises the INI text (as for
// scenarios); the [sweep] section is taken apart here, every other key is handed to
// Scenario::parse together with the run's swept values.
#include "sim/sweep/sweep_grid.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <boost/program_options.hpp>

#include "sim/io/text_io.h"

namespace po = boost::program_options;

namespace moerl {

namespace {

using Entries = std::vector<std::pair<std::string, std::string>>;

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// "section.key" → value, in file order.
Entries ini_entries(const std::string& text, const std::string& source) {
  Entries out;
  try {
    std::istringstream in(text_strip_bom(text));  // a leading byte-order mark is not part of the text
    const po::parsed_options parsed = po::parse_config_file(in, po::options_description(), true);
    for (const po::option& o : parsed.options)
      out.push_back({o.string_key, o.value.empty() ? "" : trim(o.value.front())});
  } catch (const po::error& e) {
    throw std::invalid_argument(source + ": " + text_visible(e.what()));
  }
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(trim(cur));
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

// A [sweep] list: comma-separated, no empty values (repeats are checked per axis, below).
std::vector<std::string> value_list(const std::string& source, const std::string& key, const std::string& v) {
  const std::vector<std::string> items = split(v, ',');
  for (const std::string& x : items)
    if (x.empty())
      throw std::invalid_argument(source + ": [sweep] " + key + " = " + text_shown(v) +
                                  ": expected a comma-separated list of values (an item is empty)");
  if (items.empty()) throw std::invalid_argument(source + ": [sweep] " + key + ": has no values");
  return items;
}

// Letters, digits and . + - _ are kept; anything else becomes '-'.
std::string file_safe(const std::string& v) {
  std::string out = v;
  for (char& c : out)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+' || c == '-' || c == '_')) c = '-';
  return out;
}

// A run id's part for one value: the value itself when it reads as a name (grpo, fp8-rollout), the
// key's last part and the value when it is a number or a boolean (n_experts-8, expert_bias-true).
std::string id_part(const std::string& key, const std::string& v) {
  char* end = nullptr;
  std::strtod(v.c_str(), &end);
  const bool number = !v.empty() && end == v.c_str() + v.size();
  const bool boolean = v == "true" || v == "false" || v == "on" || v == "off" || v == "yes" || v == "no";
  if (!number && !boolean) return file_safe(v);
  return file_safe(key.substr(key.rfind('.') + 1)) + "-" + file_safe(v);
}

// One axis of the product: a single key, or a zip group whose keys vary together.
struct Axis {
  std::vector<std::string> keys;
  std::vector<std::vector<std::string>> values;  // values[i][j]: key j at position i
};

}  // namespace

std::vector<std::string> sweep_name_list(const std::string& key, const std::string& text) {
  std::vector<std::string> out = split(text, ',');
  for (const std::string& x : out)
    if (x.empty())
      throw std::invalid_argument(key + " = " + text_shown(text) + ": expected a comma-separated list of names (an item is empty)");
  if (out.empty()) throw std::invalid_argument(key + ": no names given");
  return out;
}

std::vector<std::string> sweep_seed_list(const std::string& key, const std::string& text) {
  std::vector<std::string> out;
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument(key + " = " + text_shown(text) + ": " + why +
                                 " (allowed: seeds >= 0 as a list and/or ranges, e.g. 0,1,2 or 100-109)");
  };
  const auto number = [&](const std::string& x) {
    if (x.empty() || x.find_first_not_of("0123456789") != std::string::npos || x.size() > 18)
      throw bad("'" + text_shown(x) + "' is not a seed");
    return std::stoull(x);
  };
  for (const std::string& item : split(text, ',')) {
    const size_t dash = item.find('-');
    if (dash == std::string::npos) {
      out.push_back(std::to_string(number(item)));
      continue;
    }
    const uint64_t lo = number(trim(item.substr(0, dash))), hi = number(trim(item.substr(dash + 1)));
    if (hi < lo) throw bad("the range " + item + " is empty");
    if (hi - lo >= 100000) throw bad("the range " + item + " has more than 100000 seeds");
    for (uint64_t s = lo; s <= hi; ++s) out.push_back(std::to_string(s));
  }
  if (out.empty()) throw bad("no seeds");
  if (std::set<std::string>(out.begin(), out.end()).size() != out.size()) throw bad("a seed is listed twice");
  return out;
}

namespace {

// 1. The grid taken apart: [sweep] directives, swept lists, variants and the grid's own scenario keys.
struct GridParts {
  std::string base;                                                     // [sweep] base, as written
  Entries body;                                                         // the grid's scenario keys
  std::vector<std::pair<std::string, std::vector<std::string>>> lists;  // swept keys, grid order
  std::vector<std::string> seeds, variants;
  std::map<std::string, Entries> variant_keys;  // [variant.NAME] → its overrides
  std::string zip;
};

const Entries& variant_overrides(const GridParts& p, const std::string& name) {
  static const Entries none;
  const auto it = p.variant_keys.find(name);
  return it == p.variant_keys.end() ? none : it->second;
}

// Each key to its place: a variant's section, the [sweep] section, or the grid's own body.
GridParts grid_split(const std::string& text, const std::string& source) {
  GridParts p;
  std::set<std::string> seen;
  for (const auto& [k, v] : ini_entries(text, source)) {
    if (!seen.insert(k).second) throw std::invalid_argument(source + ": key '" + k + "' is given more than once");
    if (k.rfind("variant.", 0) == 0) {
      const std::string rest = k.substr(8);
      const size_t dot = rest.find('.');
      if (dot == std::string::npos || dot == 0 || rest.find('.', dot + 1) == std::string::npos)
        throw std::invalid_argument(source + ": key '" + k +
                                    "': a variant section is [variant.NAME] holding section.key = value lines");
      p.variant_keys[rest.substr(0, dot)].push_back({rest.substr(dot + 1), v});
      continue;
    }
    if (k.rfind("sweep.", 0) != 0) {
      p.body.push_back({k, v});
      continue;
    }
    const std::string sk = k.substr(6);
    if (sk == "base") p.base = v;
    else if (sk == "seeds") p.seeds = value_list(source, sk, v);
    else if (sk == "zip") p.zip = v;
    else if (sk == "variants") p.variants = value_list(source, sk, v);
    else if (sk.find('.') == std::string::npos)
      throw std::invalid_argument(source + ": unknown [sweep] key '" + sk +
                                  "' (allowed: base, seeds, zip, variants, or section.key = value, value, ...)");
    else if (sk == "run.seed")
      throw std::invalid_argument(source + ": [sweep] run.seed: list the seeds as 'seeds = 0, 1, 2'");
    else p.lists.push_back({sk, value_list(source, sk, v)});
  }
  return p;
}

// Every variant section listed, names that make file names, no key both varied and swept.
void grid_check_variants(const GridParts& p, const std::string& source) {
  for (const auto& [name, kv] : p.variant_keys)
    if (std::find(p.variants.begin(), p.variants.end(), name) == p.variants.end())
      throw std::invalid_argument(source + ": [variant." + name + "] is not listed in [sweep] variants" +
                                  (p.variants.empty() ? std::string(" (there is no such list)") : ""));
  for (const std::string& name : p.variants) {
    if (name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_+") !=
        std::string::npos)
      throw std::invalid_argument(source + ": [sweep] variants: '" + name +
                                  "': a variant name has letters, digits, '-', '_' and '+' only");
    for (const auto& [k, v] : variant_overrides(p, name)) {
      if (k == "run.seed")
        throw std::invalid_argument(source + ": [variant." + name + "] run.seed: seeds are the grid's, not a variant's");
      for (const auto& [lk, vals] : p.lists)
        if (lk == k)
          throw std::invalid_argument(source + ": [variant." + name + "] " + k + ": the grid also sweeps " + k +
                                      " (a key is either swept or set by variants)");
    }
  }
}

// A --set may not change what the grid sweeps or what a variant sets.
void grid_check_overrides(const GridParts& p, const std::vector<std::string>& overrides, const std::string& source) {
  std::map<std::string, std::string> before;
  for (const std::string& o : overrides) {
    const std::string key = trim(o.substr(0, o.find('=')));
    if (before.count(key))  // as in a file (and in Scenario::parse): a key is given once
      throw std::invalid_argument("--set " + text_shown(o) + ": key '" + text_shown(key) +
                                  "' is given more than once (also --set " + text_shown(before[key]) + ")");
    before[key] = o;
    for (const auto& [k, vals] : p.lists)
      if (k == key)
        throw std::invalid_argument("--set " + o + ": the grid " + source + " sweeps " + key +
                                    " (edit its [sweep] list instead)");
    for (const std::string& name : p.variants)
      for (const auto& [k, v] : variant_overrides(p, name))
        if (k == key)
          throw std::invalid_argument("--set " + o + ": the grid " + source + "'s variant " + name + " sets " +
                                      key + " (edit its [variant." + name + "] section instead)");
    if (key == "run.seed" && !p.seeds.empty())
      throw std::invalid_argument("--set " + o + ": the grid " + source + " sweeps the seeds");
  }
}

// --variants: the named ones, in the grid's order.
void grid_select_variants(GridParts* p, const std::vector<std::string>& selected, const std::string& source) {
  if (selected.empty()) return;
  for (const std::string& v : selected)
    if (std::find(p->variants.begin(), p->variants.end(), v) == p->variants.end()) {
      std::string known;
      for (const std::string& k : p->variants) known += (known.empty() ? "" : ", ") + k;
      throw std::invalid_argument("--variants: '" + v + "' is not a variant of " + source +
                                  (known.empty() ? " (it has none)" : " (its variants: " + known + ")"));
    }
  std::vector<std::string> kept;
  for (const std::string& v : p->variants)
    if (std::find(selected.begin(), selected.end(), v) != selected.end()) kept.push_back(v);
  p->variants = kept;
}

// 2. The base scenario (its path resolved into *base): valid on its own, then the grid's keys
//    overlay it.
std::map<std::string, std::string> grid_scenario_keys(std::string* base, const Entries& body,
                                                      const std::string& source, const std::string& dir) {
  std::map<std::string, std::string> merged;
  if (!base->empty()) {
    std::filesystem::path bp(*base);
    if (bp.is_relative()) bp = std::filesystem::path(dir) / bp;
    *base = bp.lexically_normal().string();
    std::string base_text;
    try {
      base_text = text_read_input(*base, "scenario file", kScenarioMaxBytes);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(source + ": [sweep] base = " + *base + ": " + e.what());
    }
    // A base is a scenario: a grid as base (the grid itself, or a chain or cycle of grids) is
    // refused here, by this grid's name, not with the "use moerl sweep" of `moerl run`.
    for (const auto& [k, v] : ini_entries(base_text, *base))
      if (k.rfind("sweep.", 0) == 0 || k.rfind("variant.", 0) == 0) {
        std::error_code ec;
        const bool itself = std::filesystem::equivalent(*base, source, ec);
        throw std::invalid_argument(source + ": [sweep] base = " + *base + ": " +
                                    (itself ? "is this grid itself"
                                            : "is a grid (it has a [" + k.substr(0, k.find('.')) + "] section)") +
                                    "; a base must be a scenario without [sweep] (grids do not chain)");
      }
    Scenario::parse(base_text, *base);  // its own errors name its own file
    for (const auto& [k, v] : ini_entries(base_text, *base)) merged[k] = v;
  }
  for (const auto& [k, v] : body) merged[k] = v;
  return merged;
}

// 3. The zip groups of [sweep] zip: each two or more swept keys of as many values, in one group.
std::vector<std::vector<std::string>> zip_groups(const GridParts& p, const std::string& source) {
  std::vector<std::vector<std::string>> groups;
  if (p.zip.empty()) return groups;
  for (const std::string& grp : split(p.zip, ',')) {
    std::vector<std::string> keys = split(grp, '+');
    if (keys.size() < 2)
      throw std::invalid_argument(source + ": [sweep] zip = " + p.zip + ": a group names two or more keys joined by '+'");
    size_t n = 0;
    for (const std::string& key : keys) {
      auto it = std::find_if(p.lists.begin(), p.lists.end(), [&](const auto& l) { return l.first == key; });
      if (it == p.lists.end())
        throw std::invalid_argument(source + ": [sweep] zip: '" + key + "' is not a swept key of this grid");
      if (n && it->second.size() != n)
        throw std::invalid_argument(source + ": [sweep] zip: " + keys[0] + " has " + std::to_string(n) +
                                    " values but " + key + " has " + std::to_string(it->second.size()));
      n = it->second.size();
      for (const auto& other : groups)
        if (std::find(other.begin(), other.end(), key) != other.end())
          throw std::invalid_argument(source + ": [sweep] zip: '" + key + "' is in two groups");
    }
    groups.push_back(keys);
  }
  return groups;
}

// 3. Axes: each unzipped list is one, each zip group one; the swept keys in grid order into
//    *swept_keys. A value (a zip group: a tuple of values) twice on one axis, or a seed twice,
//    would be the same run twice.
std::vector<Axis> grid_axes(const GridParts& p, const std::string& source, std::vector<std::string>* swept_keys) {
  const std::vector<std::vector<std::string>> groups = zip_groups(p, source);
  std::vector<Axis> axes;
  std::map<std::string, size_t> axis_of;  // key → axis index, for zipped keys
  for (const auto& [key, vals] : p.lists) {
    auto grp = std::find_if(groups.begin(), groups.end(), [&](const auto& gr) {
      return std::find(gr.begin(), gr.end(), key) != gr.end();
    });
    size_t a = axes.size();
    if (grp != groups.end() && axis_of.count((*grp)[0])) a = axis_of[(*grp)[0]];
    if (a == axes.size()) {
      axes.push_back(Axis{{}, std::vector<std::vector<std::string>>(vals.size())});
      if (grp != groups.end())
        for (const std::string& k : *grp) axis_of[k] = a;
    }
    axes[a].keys.push_back(key);
    for (size_t i = 0; i < vals.size(); ++i) axes[a].values[i].push_back(vals[i]);
    swept_keys->push_back(key);
  }
  if (!p.seeds.empty()) swept_keys->push_back("run.seed");
  for (const auto& a : axes) {
    std::set<std::vector<std::string>> seen;
    for (const auto& tuple : a.values)
      if (!seen.insert(tuple).second) {
        std::string t;
        for (size_t j = 0; j < tuple.size(); ++j) t += (j ? " + " : "") + a.keys[j] + "=" + tuple[j];
        throw std::invalid_argument(source + ": [sweep] " + t + " is listed twice");
      }
  }
  if (std::set<std::string>(p.seeds.begin(), p.seeds.end()).size() != p.seeds.size())
    throw std::invalid_argument(source + ": [sweep] seeds: a seed is listed twice");
  return axes;
}

// 4. Run c of seed s: its swept keys in grid order (zip groups may interleave with other lists),
//    run.seed last, and its id.
SweepRun grid_run(const std::vector<Axis>& axes, const std::vector<std::string>& swept_keys,
                  const std::vector<std::string>& seeds, size_t s, size_t c, size_t combos) {
  SweepRun r;
  r.index = static_cast<int>(s * combos + c);
  std::string name;
  size_t rest = c;
  std::vector<size_t> pos(axes.size());
  for (size_t a = axes.size(); a-- > 0;) {
    pos[a] = rest % axes[a].values.size();
    rest /= axes[a].values.size();
  }
  for (size_t a = 0; a < axes.size(); ++a)
    for (size_t j = 0; j < axes[a].keys.size(); ++j) {
      r.keys.push_back({axes[a].keys[j], axes[a].values[pos[a]][j]});
      if (!name.empty()) name += '_';
      name += id_part(axes[a].keys[j], axes[a].values[pos[a]][j]);
    }
  std::vector<std::pair<std::string, std::string>> ordered;
  for (const std::string& k : swept_keys)
    for (const auto& kv : r.keys)
      if (kv.first == k) ordered.push_back(kv);
  r.keys = ordered;
  if (!seeds.empty()) {
    r.keys.push_back({"run.seed", seeds[s]});
    name += (name.empty() ? "seed" : "-seed") + file_safe(seeds[s]);
  }
  r.id = name.empty() ? "run" : name;
  return r;
}

// 4. Expand: seeds outermost (every variant's first seed comes first, so a sweep stopped early
//    already compares every variant), then the axes with the last one fastest. Ids too long or
//    not unique become run-NNNN, for every run.
void grid_expand(SweepGrid* g, const std::vector<Axis>& axes, const std::vector<std::string>& seeds) {
  size_t combos = 1;
  for (const Axis& a : axes) combos *= a.values.size();
  const size_t n_seeds = seeds.empty() ? 1 : seeds.size();
  for (size_t s = 0; s < n_seeds; ++s)
    for (size_t c = 0; c < combos; ++c) g->runs.push_back(grid_run(axes, g->swept_keys, seeds, s, c, combos));
  std::set<std::string> ids;
  bool readable = true;
  for (const SweepRun& r : g->runs) readable = readable && r.id.size() <= 60 && ids.insert(r.id).second;
  if (!readable)
    for (SweepRun& r : g->runs) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "run-%04d", r.index);
      r.id = buf;
    }
}

// 5. Every combination is a validated scenario, or the grid is rejected: one message listing each
//    distinct problem (the first 4) with how many combinations have it.
void grid_validate(SweepGrid* g, const std::map<std::string, std::string>& merged, const GridParts& p,
                   const std::string& source, const std::vector<std::string>& overrides) {
  std::vector<std::pair<std::string, std::vector<std::string>>> errors;  // message → combinations
  int n_bad = 0;
  for (SweepRun& r : g->runs) {
    std::map<std::string, std::string> m = merged;
    std::string label;
    for (const auto& [k, v] : r.keys) {
      if (k == "variant") {
        for (const auto& [vk, vv] : variant_overrides(p, v)) m[vk] = vv;
      } else {
        m[k] = v;
      }
      label += (label.empty() ? "" : ", ") + k + "=" + v;
    }
    std::string txt;
    for (const auto& [k, v] : m) txt += k + " = " + v + "\n";
    const std::string run_source = source + " [" + (label.empty() ? r.id : label) + "]";
    try {
      r.scenario = Scenario::parse(txt, run_source, overrides);
    } catch (const std::invalid_argument& e) {
      std::string what = e.what();
      if (what.rfind(run_source + ": ", 0) == 0) what = what.substr(run_source.size() + 2);
      auto it = std::find_if(errors.begin(), errors.end(), [&](const auto& x) { return x.first == what; });
      if (it == errors.end()) errors.push_back({what, {label}});
      else it->second.push_back(label);
      ++n_bad;
    }
  }
  if (errors.empty()) return;
  // One line (an error is one line: a newline would be shown as \n), the problems separated by "; ".
  std::string msg = source + ": " + std::to_string(n_bad) + " of " + std::to_string(g->runs.size()) +
                    " combinations do not validate; nothing was run:";
  for (size_t i = 0; i < errors.size() && i < 4; ++i) {
    const auto& [what, labels] = errors[i];
    msg += std::string(i ? ";" : "") + " " + what + " (" +
           (labels.size() == g->runs.size() ? std::string("every combination")
                                            : std::to_string(labels.size()) + " combination" +
                                                  (labels.size() > 1 ? "s, e.g. " : ": ") + labels[0]) +
           ")";
  }
  if (errors.size() > 4) msg += "; ... and " + std::to_string(errors.size() - 4) + " other problems";
  throw std::invalid_argument(msg);
}

// The grid resolved (SweepGrid::resolved): flat "section.key = value" lines (a valid scenario text
// outside any section) for the merged scenario keys and the --set overrides, then [sweep], then
// the variants' sections. Overrides never touch a swept or variant key (grid_check_overrides), so
// folding them into the scenario part changes no run.
std::string grid_resolved_text(const std::map<std::string, std::string>& merged, const GridParts& p,
                               const std::vector<std::string>& overrides, const std::string& source) {
  std::map<std::string, std::string> keys = merged;
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    if (eq != std::string::npos) keys[trim(o.substr(0, eq))] = trim(o.substr(eq + 1));
  }
  const auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  std::string t = "# moerl sweep: the grid of this directory, resolved (docs/sweeps.md, \"One experiment per directory\"):\n"
                  "# " + source + " with its base and --set folded in; every --task, --resume and --index-only is\n"
                  "# checked against it, and only --extend changes it\n";
  for (const auto& [k, v] : keys) t += k + " = " + v + "\n";
  t += "[sweep]\n";
  if (!p.seeds.empty()) t += "seeds = " + join(p.seeds) + "\n";
  for (const auto& [k, vals] : p.lists)
    if (k != "variant") t += k + " = " + join(vals) + "\n";
  if (!p.zip.empty()) t += "zip = " + p.zip + "\n";
  if (!p.variants.empty()) t += "variants = " + join(p.variants) + "\n";
  for (const std::string& name : p.variants) {
    const Entries& kv = variant_overrides(p, name);
    if (kv.empty()) continue;
    t += "[variant." + name + "]\n";
    for (const auto& [k, v] : kv) t += k + " = " + v + "\n";
  }
  return t;
}

}  // namespace

SweepGrid sweep_grid_parse(const std::string& text, const std::string& source, const std::string& dir,
                           const std::vector<std::string>& overrides, const SweepSelection& select) {
  SweepGrid g;
  g.text = text;
  GridParts p = grid_split(text, source);  // 1.
  if (!select.seeds.empty()) p.seeds = select.seeds;
  grid_check_variants(p, source);
  grid_check_overrides(p, overrides, source);
  grid_select_variants(&p, select.variants, source);
  // the variants are the first axis: a key of its own, "variant", whose values are the names
  if (!p.variants.empty()) p.lists.insert(p.lists.begin(), {"variant", p.variants});
  g.base = p.base;
  const std::map<std::string, std::string> merged = grid_scenario_keys(&g.base, p.body, source, dir);  // 2.
  const std::vector<Axis> axes = grid_axes(p, source, &g.swept_keys);  // 3.
  grid_expand(&g, axes, p.seeds);                                      // 4.
  grid_validate(&g, merged, p, source, overrides);                     // 5.
  if (g.runs.empty()) throw std::invalid_argument(source + ": the grid has no runs");
  g.resolved = grid_resolved_text(merged, p, overrides, source);
  return g;
}

SweepGrid sweep_grid_load(const std::string& path, const std::vector<std::string>& overrides,
                          const SweepSelection& select) {
  SweepGrid g = sweep_grid_parse(text_read_input(path, "grid file", kScenarioMaxBytes), path, std::filesystem::path(path).parent_path().string(), overrides,
                                 select);
  g.path = path;
  return g;
}

}  // namespace moerl
