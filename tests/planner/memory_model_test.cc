#include "planner/model/memory_model.h"

#include <gtest/gtest.h>

namespace poplar {
namespace {

TEST(ModelStates, FollowTheZeroPaperForMixedPrecision) {
  // ZeRO paper, Figure 1: 7.5B parameters on 64 GPUs, K = 12.
  const std::int64_t psi = 7'500'000'000;
  EXPECT_EQ(ModelStatesPerRank(psi, 0, 64, Precision::kMixed).Total(), 16 * psi);  // 120 GB
  EXPECT_EQ(ModelStatesPerRank(psi, 1, 64, Precision::kMixed).Total(),
            4 * psi + 12 * ((psi + 63) / 64));  // 31.4 GB
  EXPECT_EQ(ModelStatesPerRank(psi, 2, 64, Precision::kMixed).Total(),
            2 * psi + 14 * ((psi + 63) / 64));  // 16.6 GB
  EXPECT_EQ(ModelStatesPerRank(psi, 3, 64, Precision::kMixed).Total(),
            16 * ((psi + 63) / 64));  // 1.9 GB
}

TEST(ModelStates, Fp32AdamKeepsFourBytesPerValue) {
  const ModelStateBytes s0 = ModelStatesPerRank(1000, 0, 4, Precision::kFp32);
  EXPECT_EQ(s0.parameters, 4000);
  EXPECT_EQ(s0.gradients, 4000);
  EXPECT_EQ(s0.optimizer, 8000);
  EXPECT_EQ(ModelStatesPerRank(1000, 1, 4, Precision::kFp32).Total(), 4000 + 4000 + 2000);
  EXPECT_EQ(ModelStatesPerRank(1000, 2, 4, Precision::kFp32).Total(), 4000 + 1000 + 2000);
  EXPECT_EQ(ModelStatesPerRank(1000, 3, 4, Precision::kFp32).Total(), 1000 + 1000 + 2000);
}

TEST(ModelStates, PartitionsRoundUp) { EXPECT_EQ(ModelStatesPerRank(10, 3, 4, Precision::kFp32).parameters, 4 * 3); }

// A profile of a 1e6-parameter fp32 model on a 100 MB device, measured alone:
// peak = 16 MB states + 4 MB runtime + 2 MB per sample; 40 samples fit.
DeviceProfile SmallProfile(int max_micro_batch) {
  DeviceProfile profile;
  profile.device_type = "dev";
  profile.memory_bytes = 100'000'000;
  profile.model = {"m", 1'000'000, Precision::kFp32, {}};
  for (int stage = 0; stage <= 3; ++stage) {
    StageProfile measured;
    measured.stage = stage;
    measured.max_micro_batch = max_micro_batch;
    for (int b : {1, 4, 16}) {
      measured.points.push_back({b, 0.1 * b, 16'000'000 + 4'000'000 + 2'000'000LL * b});
    }
    profile.stages.push_back(measured);
  }
  return profile;
}

TEST(FitMemory, SeparatesModelStatesOverheadAndActivations) {
  const DeviceProfile profile = SmallProfile(40);
  const MemoryFit fit = FitMemory(profile, profile.stages[0], 1);
  EXPECT_EQ(fit.model_state_bytes, 16'000'000);
  EXPECT_EQ(fit.fixed_bytes, 4'000'000);
  EXPECT_EQ(fit.activation_bytes_per_sample, 2'000'000);
  EXPECT_TRUE(fit.states_fit);
  EXPECT_EQ(fit.max_micro_batch, 40);
  EXPECT_EQ(fit.BytesAt(40), 100'000'000);
}

TEST(FitMemory, PartitionedStatesFreeRoomForMoreSamplesOnMoreRanks) {
  const DeviceProfile profile = SmallProfile(40);
  // Stage 3 on 8 ranks: states 2 MB instead of 16 MB -> 7 more samples.
  const MemoryFit fit = FitMemory(profile, profile.stages[3], 8);
  EXPECT_EQ(fit.model_state_bytes, 2'000'000);
  EXPECT_EQ(fit.max_micro_batch, 47);
  // Stage 0 gains nothing from more ranks.
  EXPECT_EQ(FitMemory(profile, profile.stages[0], 8).max_micro_batch, 40);
}

TEST(FitMemory, AProfileMeasuredHoldingAShareCountsThatShareInItsPeaks) {
  // The device measured stage 3 holding 1/8 of the states (2 MB, not 16): the same
  // peaks less 14 MB. Planned on 8 ranks it fits what the whole-state profile says; on
  // one rank (the whole 16 MB) 7 samples fewer, and holding nothing one more.
  const DeviceProfile whole = SmallProfile(40);
  DeviceProfile part = whole;
  StageProfile& three = part.stages[3];
  three.state_share = 1.0 / 8;
  three.max_micro_batch = 47;
  for (ProfilePoint& point : three.points) point.peak_bytes -= 14'000'000;
  for (int ranks : {1, 8}) {
    const MemoryFit want = FitMemory(whole, whole.stages[3], ranks);
    const MemoryFit got = FitMemory(part, three, ranks);
    EXPECT_EQ(got.model_state_bytes, want.model_state_bytes) << ranks << " ranks";
    EXPECT_EQ(got.fixed_bytes, want.fixed_bytes) << ranks << " ranks";
    EXPECT_EQ(got.max_micro_batch, want.max_micro_batch) << ranks << " ranks";
  }
  EXPECT_EQ(FitMemory(part, three, 8).max_micro_batch, 47);
  EXPECT_EQ(FitMemory(part, three, 1).max_micro_batch, 40);
  EXPECT_EQ(FitMemory(part, three, 8, 0.0).max_micro_batch, 48);
}

TEST(FitMemory, CollectivesInFlightHoldNTimesTheRanksShareOfTheirElements) {
  // 1.5M elements in flight (fp32: 6 MB), measured alone: a rank of N holding f holds
  // buffers of N·f of them; the even split the whole 6 MB, a rank alone or holding
  // nothing none.
  DeviceProfile profile = SmallProfile(40);
  profile.stages[3].collective_elements_in_flight = 1'500'000;
  const MemoryFit even = FitMemory(profile, profile.stages[3], 8);
  EXPECT_EQ(even.collective_bytes, 6'000'000);
  EXPECT_EQ(even.max_micro_batch, 47 - 3);  // 6 MB at 2 MB a sample
  EXPECT_EQ(even.BytesAt(44), 2'000'000 + 4'000'000 + 6'000'000 + 88'000'000);
  EXPECT_EQ(FitMemory(profile, profile.stages[3], 8, 0.25).collective_bytes, 12'000'000);
  EXPECT_EQ(FitMemory(profile, profile.stages[3], 8, 0.0).collective_bytes, 0);
  EXPECT_EQ(FitMemory(profile, profile.stages[3], 1).collective_bytes, 0);
  EXPECT_EQ(FitMemory(profile, profile.stages[3], 1).max_micro_batch, 40);
  // Mixed precision moves 2 bytes an element.
  profile.model.precision = Precision::kMixed;
  EXPECT_EQ(FitMemory(profile, profile.stages[3], 8).collective_bytes, 3'000'000);
  // Buffers that leave no room make the stage's states not fit.
  profile.model.precision = Precision::kFp32;
  profile.stages[3].collective_elements_in_flight = 24'000'000;
  EXPECT_FALSE(FitMemory(profile, profile.stages[3], 8).states_fit);
  // Absurd values fit nowhere, without overflowing.
  profile.stages[3].collective_elements_in_flight = 4'000'000'000'000;  // 1.6e19 bytes on a million ranks
  EXPECT_FALSE(FitMemory(profile, profile.stages[3], 1'000'000, 1.0).states_fit);
}

TEST(FitMemory, MeasuredCapBelowTheModelWins) {
  // Fragmentation: only 30 fit when measured although the line says 40.
  const DeviceProfile profile = SmallProfile(30);
  EXPECT_EQ(FitMemory(profile, profile.stages[0], 1).max_micro_batch, 30);
  EXPECT_EQ(FitMemory(profile, profile.stages[3], 8).max_micro_batch, 37);
}

TEST(FitMemory, ModelThatDoesNotFitHasNoMicroBatch) {
  DeviceProfile profile = SmallProfile(40);
  profile.memory_bytes = 10'000'000;  // less than the 16 MB of model states
  const MemoryFit fit = FitMemory(profile, profile.stages[0], 1);
  EXPECT_FALSE(fit.states_fit);
  EXPECT_EQ(fit.max_micro_batch, 0);
}

TEST(FitMemory, BuildingTheEngineMustFitBesideTheModelWhole) {
  // The worker makes the model whole in fp32 (4 MB here) before the engine takes its
  // share: at stage 3 on 8 ranks the states (2 MB) and a sample fit in 7 MB, but the
  // model and the rank's parameters, optimizer state and gradient shard do not.
  DeviceProfile profile = SmallProfile(40);
  EXPECT_EQ(FitMemory(profile, profile.stages[3], 8).construction_bytes, 4'000'000 + 2'000'000);
  profile.memory_bytes = 7'000'000;
  profile.stages[3].points = {{1, 0.1, 2'000'000 + 2'000'000}, {2, 0.2, 2'000'000 + 4'000'000}};
  profile.stages[3].state_share = 1.0 / 8;
  profile.stages[3].max_micro_batch = 2;
  EXPECT_TRUE(FitMemory(profile, profile.stages[3], 8).states_fit);
  EXPECT_EQ(FitMemory(profile, profile.stages[3], 8).max_micro_batch, 2);
  profile.memory_bytes = 5'000'000;  // room for the states and a sample, not the model whole
  const MemoryFit fit = FitMemory(profile, profile.stages[3], 8);
  EXPECT_FALSE(fit.states_fit);
  EXPECT_EQ(fit.max_micro_batch, 0);
  // Stage 1 in fp32 builds no higher than it trains: the gradients come once the model
  // has moved into the engine's buffer.
  const ModelStateBytes stage1 = ModelStatesPerRank(1'000'000, 1, 4, Precision::kFp32);
  EXPECT_EQ(ConstructionBytes(1'000'000, 1, stage1), stage1.Total());
}

}  // namespace
}  // namespace poplar
