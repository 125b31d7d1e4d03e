// The agent's Prometheus text (agent/prometheus.h): every device's gauges, the job that
// holds one, each local rank's step gauges from its latest record, label values escaped.
#include "agent/prometheus.h"

#include <gtest/gtest.h>

#include "test_support.h"

namespace poplar {
namespace {

using ::poplar::testing::Contains;

TEST(PrometheusText, DevicesJobsAndRanksAsGauges) {
  const std::vector<DeviceState> devices = {{"NVIDIA-H200 0", "NVIDIA-H200", 150'000'000'000, true, "llama-7b"},
                                            {"NVIDIA-H200 1", "NVIDIA-H200", 150'000'000'000, false, ""}};
  const std::vector<RankState> ranks = {{"llama-7b",
                                         3,
                                         {{"step", 12},
                                          {"step_s", 0.5},
                                          {"compute_s", 0.3},
                                          {"optimizer_s", 0.05},
                                          {"loss", 2.5},
                                          {"samples_per_s", 128.0},
                                          {"communication_s", 0.1}}},
                                        {"llama-7b", 4, nlohmann::json("not a record")}};
  const std::string text = PrometheusText("node-a", devices, ranks);
  EXPECT_TRUE(Contains(text, "# TYPE poplar_device_busy gauge\n"));
  EXPECT_TRUE(Contains(text, "poplar_device_busy{node=\"node-a\",device=\"NVIDIA-H200 0\",type=\"NVIDIA-H200\"} 1\n"));
  EXPECT_TRUE(Contains(text, "poplar_device_busy{node=\"node-a\",device=\"NVIDIA-H200 1\",type=\"NVIDIA-H200\"} 0\n"));
  EXPECT_TRUE(Contains(
      text,
      "poplar_device_memory_bytes{node=\"node-a\",device=\"NVIDIA-H200 1\",type=\"NVIDIA-H200\"} 150000000000\n"));
  EXPECT_TRUE(Contains(
      text, "poplar_device_job{node=\"node-a\",device=\"NVIDIA-H200 0\",type=\"NVIDIA-H200\",job=\"llama-7b\"} 1\n"));
  EXPECT_FALSE(Contains(text, "device=\"NVIDIA-H200 1\",type=\"NVIDIA-H200\",job="));
  const std::string labels = "{node=\"node-a\",job=\"llama-7b\",rank=\"3\"}";
  EXPECT_TRUE(Contains(text, "poplar_rank_step" + labels + " 12\n"));
  EXPECT_TRUE(Contains(text, "poplar_rank_step_seconds" + labels + " 0.5\n"));
  EXPECT_TRUE(Contains(text, "poplar_rank_loss" + labels + " 2.5\n"));
  EXPECT_TRUE(Contains(text, "poplar_rank_samples_per_second" + labels + " 128\n")) << text;
  EXPECT_TRUE(Contains(text, "poplar_rank_communication_seconds" + labels + " 0.1\n"));
  EXPECT_TRUE(Contains(text, "poplar_rank_idle_seconds" + labels + " 0.15"));  // 0.5 - 0.3 - 0.05, rounded
  EXPECT_FALSE(Contains(text, "rank=\"4\"")) << "a record that is not one is left out";
}

TEST(PrometheusText, EscapesLabelValues) {
  const std::string text = PrometheusText("a\"b\\c\nd", {{"x 0", "x", 1, false, ""}}, {});
  EXPECT_TRUE(Contains(text, "node=\"a\\\"b\\\\c\\nd\"")) << text;
}

}  // namespace
}  // namespace poplar
