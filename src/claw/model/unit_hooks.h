// Units and the hooks through which the data-parallel engine manages
// parameter and gradient memory (ZeRO) and overlaps communication.
//
// A unit is a group of parameters used and differentiated together: the
// embedding (unit 0), each block (1..L), the final norm (L+1) and the output
// layer (L+2; empty when its weight is tied to the embedding's). A pipeline
// stage (gpt.h's PipelineStage) has the units of what it holds, numbered
// from 0 in the same order; its output layer unit holds its copy of the tied
// word embeddings when the embedding is on another stage. A unit's
// parameters are contiguous in each region of the ParamStore (its trainable
// parameters in a trainable region, its frozen ones in a frozen region).
//
// The model calls, for each unit, in a fixed order (GPT::use_order,
// GPT::grad_order):
//   before_use(u) / after_use(u)    around every use of u's values
//   grads_begin(u) / grads_end(u)   around the writes of u's gradients in one
//                                   micro-batch (the tied word embedding's
//                                   gradient begins in the output layer's
//                                   forward and ends after the embedding's
//                                   backward)
// and begin_pass(training) before each micro-batch. With no hooks installed
// (single rank) nothing is called.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "claw/model/param.h"

namespace claw::model {

struct Unit {
  std::string name;
  std::vector<Param*> params;
  // Per store region (ParamStore::regions()): the unit's range [lo, hi) in
  // that region's coordinates (floats), lo == hi where it has no parameter.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t size(int region) const { return ranges[region].second - ranges[region].first; }
};

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void begin_pass(bool training) {}
  virtual void before_use(int unit) {}
  virtual void after_use(int unit) {}
  virtual void grads_begin(int unit) {}
  virtual void grads_end(int unit) {}
};

}  // namespace claw::model
