// GPU discovery through NVML and the busy check, against tests/agent/fake_nvml.cc: the
// agent's GPU paths, run where there is no GPU.
#include "agent/devices.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "planner/base/input_error.h"
#include "test_support.h"

namespace poplar {
namespace {

using poplar::testing::Contains;
using poplar::testing::ContainsAll;

constexpr char kH200Bytes[] = "150754820096";

// The fake library describes `gpus` (FAKE_NVML_GPUS) while this lives.
class FakeGpus {
 public:
  explicit FakeGpus(const std::string& gpus) { ::setenv("FAKE_NVML_GPUS", gpus.c_str(), 1); }
  ~FakeGpus() { ::unsetenv("FAKE_NVML_GPUS"); }
};

AgentConfig ConfigWithGpus() {
  AgentConfig config;
  config.discover_gpus = true;
  config.nvml_library = FAKE_NVML_LIBRARY;
  config.emulated.push_back({"emu", 1, 1, 1.0, 16 << 20});
  return config;
}

TEST(Devices, DiscoversGpusThroughNvmlBeforeTheEmulatedOnes) {
  const FakeGpus gpus(std::string("NVIDIA H200|") + kH200Bytes + "|9.0|;NVIDIA H200|" + kH200Bytes + "|9.0|");
  std::string why;
  const auto devices = ListDevices(ConfigWithGpus(), &why);
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(why, "");
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(devices[i].type, "NVIDIA-H200");  // spaces become '-': a plain file name
    EXPECT_EQ(devices[i].index, i);
    EXPECT_EQ(devices[i].memory_bytes, 150754820096);
    EXPECT_EQ(devices[i].compute_capability, "9.0");
    EXPECT_FALSE(devices[i].emulated);
    EXPECT_TRUE(devices[i].processes.empty());
  }
  EXPECT_TRUE(devices[2].emulated);
}

// A Slurm job's GPUs are those whose /dev/nvidiaN its id list names (here minor numbers
// 4, 5 and 7 at NVML indices 0-2), not NVML's indices; a list that is not ids is refused.
TEST(Devices, ASlurmJobHoldsTheGpusItsIdsNameByMinorNumber) {
  const std::string h200 = std::string("NVIDIA H200|") + kH200Bytes + "|9.0|";
  const FakeGpus gpus(h200 + "|4;" + h200 + "|5;" + h200 + "|7");
  std::string why;
  const std::vector<DeviceInfo> found = DiscoverNvidiaGpus(FAKE_NVML_LIBRARY, &why);
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[1].minor_number, 5);
  EXPECT_EQ(found[1].uuid, "GPU-fake-5");
  std::vector<DeviceInfo> held = GpusOfSlurmJob(found, "5,7", "SLURM_STEP_GPUS");
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0].index, 1);
  EXPECT_EQ(held[1].index, 2);
  EXPECT_EQ(GpusOfSlurmJob(found, "3-5", "SLURM_STEP_GPUS").size(), 2u);
  EXPECT_TRUE(GpusOfSlurmJob(found, "0,1,2", "SLURM_JOB_GPUS").empty());
  for (const std::string bad : {"", "a", "1,,2", "5-3", "-1", "1;2", "99999999"}) {
    try {
      GpusOfSlurmJob(found, bad, "SLURM_JOB_GPUS");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& error) {
      EXPECT_TRUE(Contains(error.what(), "SLURM_JOB_GPUS")) << error.what();
    }
  }
}

TEST(Devices, SaysWhyThereIsNoGpu) {
  AgentConfig config = ConfigWithGpus();
  config.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  std::string why;
  EXPECT_EQ(ListDevices(config, &why).size(), 1u);
  EXPECT_EQ(why, "no NVIDIA driver (/nonexistent/libnvidia-ml.so.1 not found)");

  config.nvml_library = FAKE_NVML_LIBRARY;
  ::setenv("FAKE_NVML_FAIL_INIT", "1", 1);
  EXPECT_EQ(ListDevices(config, &why).size(), 1u);
  ::unsetenv("FAKE_NVML_FAIL_INIT");
  EXPECT_TRUE(Contains(why, "NVML failed to initialise")) << why;

  const FakeGpus none("");
  ListDevices(config, &why);
  EXPECT_EQ(why, "NVML reports no GPU");

  // A file that exists but is no library is not "no driver": the loader's reason is given.
  poplar::testing::ScratchDir dir("devices");
  config.nvml_library = dir.Write("not-a-library.so", "just text\n");
  ListDevices(config, &why);
  EXPECT_TRUE(ContainsAll(why, {"cannot load " + config.nvml_library + ": "})) << why;
}

// A GPU that a process outside poplar computes on is not handed to a job or a profile:
// both would share its memory, and a profile would time two programs at once.
TEST(Devices, AGpuWithAProcessTheAgentDidNotStartIsBusy) {
  const FakeGpus gpus(std::string("NVIDIA H200|") + kH200Bytes + "|9.0|4242;NVIDIA H200|" + kH200Bytes + "|9.0|");
  const auto devices = ListDevices(ConfigWithGpus());
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[0].processes, std::vector<unsigned int>{4242});
  EXPECT_EQ(Holder(devices[0], {}), "process 4242, not started by this agent");
  EXPECT_EQ(FindDevice(devices, "NVIDIA-H200").index, 1);
  EXPECT_EQ(DeviceOfType(devices, "NVIDIA-H200").index, 0);  // existence only
  try {
    FindDevice(devices, "NVIDIA-H200", {{"NVIDIA-H200 1", "job 'exp1'"}});
    ADD_FAILURE() << "a busy GPU was handed out";
  } catch (const DeviceUnavailable& error) {
    EXPECT_TRUE(ContainsAll(error.what(),
                            {"every device of type 'NVIDIA-H200' on this node is in use",
                             "NVIDIA-H200 0 (process 4242, not started by this agent)", "NVIDIA-H200 1 (job 'exp1')"}))
        << error.what();
  }
}

// NVML answers "insufficient size" when more processes run than the buffer holds; the
// agent asks again with room for all of them.
TEST(Devices, ReadsEveryProcessOfABusyGpu) {
  std::string pids;
  for (int pid = 1000; pid < 1040; ++pid) pids += (pids.empty() ? "" : ",") + std::to_string(pid);
  const FakeGpus gpus(std::string("NVIDIA H200|") + kH200Bytes + "|9.0|" + pids);
  const auto devices = ListDevices(ConfigWithGpus());
  ASSERT_FALSE(devices.empty());
  ASSERT_EQ(devices[0].processes.size(), 40u);
  EXPECT_EQ(devices[0].processes.front(), 1000u);
  EXPECT_EQ(devices[0].processes.back(), 1039u);
}

}  // namespace
}  // namespace poplar
