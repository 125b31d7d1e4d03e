// The parts of `poplar launch --slurm` that read Slurm's words: srun's report of a failed
// task, `poplar-agent --list-gpus`'s line, the allocation's nodes with their devices, and
// the CPUs each node holds and each rank gets.
#include <gtest/gtest.h>

#include "launcher/head/slurm_allocation.h"
#include "launcher/head/srun_step.h"
#include "planner/base/command_failed.h"
#include "planner/base/input_error.h"
#include "test_support.h"

namespace poplar {
namespace {

using testing::Contains;

TEST(SrunReport, ATaskThatExitedIsThatRanksFailure) {
  const auto failure = ParseTaskFailure("srun: error: poplar1: task 1: Exited with exit code 3");
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->ranks, std::vector<int>{1});
  EXPECT_EQ(failure->what, "exited with status 3");
  EXPECT_EQ(failure->exit_code, 3);
}

TEST(SrunReport, TasksKilledBySignalAreNamedWithTheSignal) {
  const auto failure = ParseTaskFailure("srun: error: node7: tasks 0-2,5: Terminated");
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->ranks, (std::vector<int>{0, 1, 2, 5}));
  EXPECT_EQ(failure->what, "was killed by signal 15 (Terminated)");
  EXPECT_EQ(failure->exit_code, 143);
  const auto killed = ParseTaskFailure("srun: error: node7: task 4: Killed");
  ASSERT_TRUE(killed.has_value());
  EXPECT_EQ(killed->exit_code, 137);
}

TEST(SrunReport, OtherLinesAreNoTaskFailure) {
  for (const char* line : {"srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
                           "srun: error: Unable to create step for job 12: Invalid generic resource (gres)",
                           "0: poplar-worker[rank 0]: step 3", "srun: error: n1: task x: Exited with exit code 1",
                           "srun: error: n1: tasks 3-1: Killed", "srun: error: n1: task 1: Exited with exit code 99999",
                           "srun: error: n1: task 1"}) {
    EXPECT_FALSE(ParseTaskFailure(line).has_value()) << line;
  }
}

TEST(ListedGpus, ALineIsReadAsUntrustedInput) {
  const NodeGpus node =
      ParseNodeGpus(R"({"node": "gpu3", "gpus": [{"type": "NVIDIA-H200", "index": 0, "memory_bytes": 150000000000},)"
                    R"( {"type": "NVIDIA-H200", "index": 1, "memory_bytes": 150000000000}]})",
                    "list");
  EXPECT_EQ(node.node, "gpu3");
  ASSERT_EQ(node.gpus.size(), 2u);
  EXPECT_EQ(node.gpus[1].index, 1);
  EXPECT_EQ(node.gpus[1].uuid, "");
  EXPECT_EQ(ParseNodeGpus(
                R"({"node": "n", "gpus": [{"type": "T", "index": 3, "memory_bytes": 1, "uuid": "GPU-ab-12"}]})", "list")
                .gpus[0]
                .uuid,
            "GPU-ab-12");
  for (const auto& [line, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"gpus": []})", "node"},
           {R"({"node": "n", "gpus": 3})", "gpus"},
           {R"({"node": "n", "gpus": [{"type": "a b", "index": 0, "memory_bytes": 1}]})", "gpus[0].type"},
           {R"({"node": "n", "gpus": [{"type": "T", "index": -1, "memory_bytes": 1}]})", "gpus[0].index"},
           {R"({"node": "n", "gpus": [{"type": "T", "index": 0, "memory_bytes": 1, "uuid": "GPU-1 x"}]})",
            "gpus[0].uuid"},
           {R"({"node": "n", "gpus": [], "extra": 1})", "extra"}}) {
    try {
      ParseNodeGpus(line, "list");
      ADD_FAILURE() << "accepted: " << line;
    } catch (const InputError& error) {
      EXPECT_EQ(error.key(), key) << line;
    }
  }
  EXPECT_THROW(ParseNodeGpus("{not json", "list"), InputError);
}

TEST(AllocationNodes, EachNodeHasItsGpusThenTheEmulatedDevices) {
  SlurmAllocation allocation;
  allocation.job_id = "12";
  allocation.nodes = {"gpu1", "gpu2"};
  allocation.addresses = {{"gpu1", "10.0.0.1"}, {"gpu2", "10.0.0.2"}};
  SlurmSpec slurm;
  slurm.emulated = {{"emu", 2}};
  const std::vector<NodeGpus> gpus = {{"gpu2", {{"NVIDIA-V100", 0}, {"NVIDIA-V100", 1}, {"NVIDIA-T4", 2}}, ""},
                                      {"gpu1", {{"NVIDIA-T4", 0}}, ""}};
  const std::vector<NodeSpec> nodes = AllocationNodes(allocation, slurm, gpus);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].name, "gpu1");
  EXPECT_EQ(nodes[0].host, "10.0.0.1");
  ASSERT_EQ(nodes[0].devices.size(), 2u);
  EXPECT_EQ(nodes[0].devices[0].type, "NVIDIA-T4");
  EXPECT_EQ(nodes[0].devices[1].type, "emu");
  EXPECT_EQ(nodes[0].devices[1].count, 2);
  ASSERT_EQ(nodes[1].devices.size(), 3u);
  EXPECT_EQ(nodes[1].devices[0].type, "NVIDIA-V100");
  EXPECT_EQ(nodes[1].devices[0].count, 2);
  EXPECT_EQ(nodes[1].devices[1].type, "NVIDIA-T4");
}

TEST(AllocationNodes, ANodeWithNoDeviceIsNamedWithWhyNvmlFoundNone) {
  SlurmAllocation allocation;
  allocation.nodes = {"cpu1"};
  allocation.addresses = {{"cpu1", "10.0.0.9"}};
  const SlurmSpec slurm;  // gpus: auto, nothing emulated
  try {
    AllocationNodes(allocation, slurm, {{"cpu1", {}, "no NVIDIA driver (libnvidia-ml.so.1 not found)"}});
    ADD_FAILURE() << "a node without devices was accepted";
  } catch (const CommandFailed& error) {
    EXPECT_TRUE(Contains(error.what(), "node 'cpu1'")) << error.what();
    EXPECT_TRUE(Contains(error.what(), "no NVIDIA driver")) << error.what();
  }
}

TEST(CpusPerNode, RunsOfNodesAreExpandedInTheAllocationsOrder) {
  EXPECT_EQ(ParseCpusPerNode("72(x2),36", 3), (std::vector<int>{72, 72, 36}));
  EXPECT_EQ(ParseCpusPerNode("2", 1), (std::vector<int>{2}));
  EXPECT_EQ(ParseCpusPerNode("8,16(x1),4", 3), (std::vector<int>{8, 16, 4}));
}

TEST(CpusPerNode, AMalformedOrMismatchedListIsQuotedWithWhy) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "names 0 nodes, the allocation 2"},
      {"4", "names 1 nodes, the allocation 2"},
      {"4(x3)", "names more nodes than the allocation's 2"},
      {"4(x99999999999)", "each N or N(xK)"},
      {"4(x2", "each N or N(xK)"},
      {"four,4", "each N or N(xK)"},
      {"0,4", "gives a node no CPU"},
      {"-4,4", "each N or N(xK)"},
      {"4,,4", "each N or N(xK)"},
      {"4(x0),4", "gives a node no CPU"},
  };
  for (const auto& [text, why] : cases) {
    try {
      ParseCpusPerNode(text, 2);
      ADD_FAILURE() << "'" << text << "' was accepted";
    } catch (const CommandFailed& error) {
      EXPECT_TRUE(Contains(error.what(), "SLURM_JOB_CPUS_PER_NODE '" + text + "'")) << error.what();
      EXPECT_TRUE(Contains(error.what(), why)) << text << ": " << error.what();
    }
  }
}

TEST(CpusPerRank, EachRankGetsTheSmallestEvenShareOfItsNode) {
  // 4 ranks on a node of 32 CPUs, 2 on one of 12: srun gives every task 6.
  EXPECT_EQ(CpusPerRank({{"a", 32}, {"b", 12}, {"c", 2}}, {{"a", 4}, {"b", 2}}), 6);
  EXPECT_EQ(CpusPerRank({{"a", 7}}, {{"a", 2}}), 3);
  EXPECT_EQ(CpusPerRank({}, {{"a", 2}}), 0) << "unknown CPUs: srun's default";
  try {
    CpusPerRank({{"a", 1}}, {{"a", 2}});
    ADD_FAILURE() << "two ranks on one CPU were accepted";
  } catch (const CommandFailed& error) {
    EXPECT_TRUE(Contains(error.what(), "node 'a' holds 1 CPU(s) of this allocation for 2 ranks")) << error.what();
  }
}

}  // namespace
}  // namespace poplar
