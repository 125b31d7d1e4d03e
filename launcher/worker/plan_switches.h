// Plans that replace the running one between two steps (docs/worker.md, "Plan
// switches"). Rank 0 alone reads the folder --plan-switches names, for plan-1.json,
// plan-2.json, ... in that order (its agent writes them there). A plan the run cannot
// take (not a valid plan, or not RequireSwitchable from the running one) is refused:
// rank 0 says why on stderr and looks for the next number. The ranks agree through the
// step's loss all-reduce, in which rank 0 offers the number and size of the plan it
// found; every rank then receives the plan's text by broadcast and trains the next step
// with it. Only the micro-batches change, so the training does not.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "launcher/comm/communicator.h"
#include "planner/formats/worker_plan.h"

namespace poplar {

struct PlanOffer {
  int number = 0;  // the N of plan-N.json
  std::string text;
};

class PlanSwitches {
 public:
  // `folder` empty: no plan ever replaces the running one. `batch_min` > 0: a plan may
  // change the global batch within [batch_min, batch_max] (RequireSwitchable).
  PlanSwitches(std::string folder, int rank, std::int64_t batch_min = 0, std::int64_t batch_max = 0);

  // Rank 0: the next plan of the folder that can replace `running`; nullopt when none
  // has come (and on every other rank).
  std::optional<PlanOffer> Next(const WorkerPlan& running);

  // Every rank, once the all-reduce said that rank 0 offers plan `number` of `bytes`
  // bytes (`offer`, rank 0's): its text from rank 0 (a broadcast), parsed and checked
  // against `running`. Collective.
  WorkerPlan Receive(Communicator& communicator, torch::Device device, int number, std::int64_t bytes,
                     const std::optional<PlanOffer>& offer, const WorkerPlan& running);

  // The plan in force: 0 for --plan, else the N of the plan-N.json last received.
  int number() const { return number_; }

 private:
  std::string PathOf(int number) const;

  std::string folder_;
  int rank_;
  std::int64_t batch_min_, batch_max_;
  int number_ = 0;
  int next_ = 1;  // the number rank 0 looks for
};

}  // namespace poplar
