#pragma once
// The built-in policies. Each lives in its own file in this folder and has
// one line in runtime/policy.cpp's registry.
#include "runtime/policy.hpp"

namespace actorpipe {

/// GPipe (and naive, which is GPipe with one microbatch).
class gpipe_policy : public policy {
public:
  explicit gpipe_policy(std::string name = "gpipe") : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::optional<op_id> next(const stage_view& v) const override;

private:
  std::string name_;
};

/// 1F1B (PipeDream-flush).
class one_f_one_b_policy : public policy {
public:
  std::string name() const override { return "1f1b"; }
  std::optional<op_id> next(const stage_view& v) const override;
};

}  // namespace actorpipe
