#include "launcher/worker/plan_switches.h"

#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <utility>

#include "planner/base/input_error.h"
#include "planner/base/text_file.h"

namespace poplar {

PlanSwitches::PlanSwitches(std::string folder, int rank, std::int64_t batch_min, std::int64_t batch_max)
    : folder_(std::move(folder)), rank_(rank), batch_min_(batch_min), batch_max_(batch_max) {}

std::string PlanSwitches::PathOf(int number) const {
  return (std::filesystem::path(folder_) / ("plan-" + std::to_string(number) + ".json")).string();
}

std::optional<PlanOffer> PlanSwitches::Next(const WorkerPlan& running) {
  if (rank_ != 0 || folder_.empty()) return std::nullopt;
  std::error_code error;
  while (std::filesystem::exists(PathOf(next_), error)) {
    const int number = next_++;
    const std::string path = PathOf(number);
    try {
      std::string text = ReadTextFile(path);
      RequireSwitchable(running, ParseWorkerPlan(text, path), batch_min_, batch_max_);
      return PlanOffer{number, std::move(text)};
    } catch (const InputError& refused) {
      std::cerr << "poplar-worker[rank 0]: warning: plan switch refused, training goes on with plan " << number_ << ": "
                << refused.what() << std::endl;
    }
  }
  return std::nullopt;
}

WorkerPlan PlanSwitches::Receive(Communicator& communicator, torch::Device device, int number, std::int64_t bytes,
                                 const std::optional<PlanOffer>& offer, const WorkerPlan& running) {
  auto text = torch::zeros({bytes}, torch::TensorOptions().dtype(torch::kUInt8));
  if (offer) std::memcpy(text.data_ptr<std::uint8_t>(), offer->text.data(), offer->text.size());
  text = text.to(device);
  communicator.Broadcast(text, 0);
  text = text.cpu();
  const std::string received(reinterpret_cast<const char*>(text.data_ptr<std::uint8_t>()), text.numel());
  WorkerPlan next = ParseWorkerPlan(received, PathOf(number));
  RequireSwitchable(running, next, batch_min_, batch_max_);
  number_ = number;
  return next;
}

}  // namespace poplar
