// results.cpp — see results.h.
#include "sim/io/results.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "store/h5io.h"

namespace moerl {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

int64_t RunResults::row_size(const Series& s) const {
  int64_t n = 1;
  for (int64_t d : s.row_shape) n *= d;
  return n;
}

void RunResults::pad(Series* s) const {
  s->data.resize(static_cast<size_t>(steps_ * row_size(*s)), kNaN);
}

void RunResults::begin_step(int64_t step) {
  if (step != steps_)
    throw std::logic_error("results: step " + std::to_string(step) + " follows " + std::to_string(steps_ - 1));
  ++steps_;
  for (auto& [name, s] : series_) pad(&s);
}

void RunResults::set(const std::string& name, double value) { set_row(name, {}, {value}); }

void RunResults::set_row(const std::string& name, const std::vector<int64_t>& row_shape,
                         const std::vector<double>& row) {
  if (steps_ == 0) throw std::logic_error("results: set before begin_step");
  Series& s = series_[name];
  if (s.data.empty()) s.row_shape = row_shape;
  if (s.row_shape != row_shape || static_cast<int64_t>(row.size()) != row_size(s))
    throw std::runtime_error("results: metric " + name + " has rows of " + std::to_string(row.size()) +
                             " values now, " + std::to_string(row_size(s)) +
                             " before (a run resumed on another number of ranks? resume it on the ranks it started on)");
  pad(&s);
  std::copy(row.begin(), row.end(), s.data.end() - static_cast<std::ptrdiff_t>(row.size()));
}

void RunResults::dump(int64_t step, const std::string& name, const std::vector<int64_t>& shape,
                      const std::vector<float>& data) {
  dumps_["dump/step_" + std::to_string(step) + "/" + name] = {shape, data};
}

double RunResults::last(const std::string& name) const {
  auto it = series_.find(name);
  if (it == series_.end() || it->second.data.empty()) return kNaN;
  return it->second.data.back();
}

double final_reward_of(const std::vector<double>& reward_mean) {
  double sum = 0.0;
  int n = 0;
  for (size_t i = reward_mean.size(); i-- > 0 && n < kFinalRewardSteps;)
    if (std::isfinite(reward_mean[i])) {
      sum += reward_mean[i];
      ++n;
    }
  return n ? sum / n : kNaN;
}

double RunResults::final_reward() const {
  const std::vector<double>* r = series("reward_mean");
  return r ? final_reward_of(*r) : kNaN;
}

const std::vector<double>* RunResults::series(const std::string& name) const {
  auto it = series_.find(name);
  return it == series_.end() ? nullptr : &it->second.data;
}

void RunResults::write(const std::string& path) const {
  H5File f = H5File::create(path);
  for (const auto& [k, v] : attrs) f.set_attr("/", k, v);
  for (const auto& [k, v] : int_attrs) f.set_attr("/", k, v);
  for (const auto& [k, v] : float_attrs) f.set_attr("/", k, v);
  f.set_attr("/", "version", kResultsVersion);
  f.set_attr("/", "steps", steps_);
  for (const auto& [name, s] : series_) {
    Series padded = s;
    pad(&padded);
    std::vector<int64_t> shape{steps_};
    shape.insert(shape.end(), s.row_shape.begin(), s.row_shape.end());
    f.write("metrics/" + name, shape, padded.data.data());
  }
  for (const auto& [name, d] : dumps_) f.write(name, d.first, d.second.data());
  f.commit();
}

void RunResults::load(const std::string& path, int64_t steps) {
  const H5File f = H5File::open(path);
  series_.clear();
  dumps_.clear();
  steps_ = steps;
  for (const std::string& full : f.datasets_below("metrics")) {
    std::vector<int64_t> shape = f.shape(full);
    if (shape.empty() || shape[0] < steps)
      throw std::runtime_error(path + ": " + full + ": has " + (shape.empty() ? std::string("no") : std::to_string(shape[0])) +
                               " steps, resume needs " + std::to_string(steps));
    std::vector<double> all(static_cast<size_t>(std::max<int64_t>(1, [&] { int64_t n = 1; for (int64_t d : shape) n *= d; return n; }())));
    f.read(full, shape, all.data());
    Series s;
    s.row_shape.assign(shape.begin() + 1, shape.end());
    s.data.assign(all.begin(), all.begin() + steps * row_size(s));
    series_[full.substr(std::string("metrics/").size())] = std::move(s);
  }
}

}  // namespace moerl
