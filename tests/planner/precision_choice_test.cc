// The workers' precision (planner/cluster/precision_choice.h): the cluster file's word,
// resolved against whether each device type computes in bf16.
#include "planner/cluster/precision_choice.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "planner/base/input_error.h"

namespace poplar {
namespace {

ClusterSpec ClusterIn(const std::string& precision_name) {
  ClusterSpec cluster;
  cluster.file = "cluster.yaml";
  cluster.precision = precision_name == "fp32" ? Precision::kFp32 : Precision::kMixed;
  cluster.precision_name = precision_name;
  return cluster;
}

// Profiles of types A (bf16 as `a`) and B (as `b`).
std::map<std::string, DeviceProfile> Profiles(std::optional<bool> a, std::optional<bool> b) {
  std::map<std::string, DeviceProfile> profiles;
  profiles["A"].bf16 = a;
  profiles["B"].bf16 = b;
  return profiles;
}

TEST(PrecisionChoice, MixedIsBf16WhereEveryDeviceHasItElseFp16) {
  EXPECT_EQ(ChooseWorkerPrecision(ClusterIn("mixed"), Profiles(true, true)).name, "bf16");
  EXPECT_EQ(ChooseWorkerPrecision(ClusterIn("mixed"), Profiles(std::nullopt, true)).name, "bf16");  // unknown: yes
  EXPECT_EQ(ChooseWorkerPrecision(ClusterIn("mixed"), {}).name, "bf16");
  const WorkerPrecisionChoice one = ChooseWorkerPrecision(ClusterIn("mixed"), Profiles(true, false));
  EXPECT_EQ(one.name, "fp16");
  EXPECT_NE(one.reason.find("B has no bf16"), std::string::npos) << one.reason;
}

TEST(PrecisionChoice, Fp16AndFp32AreTakenAsWritten) {
  EXPECT_EQ(ChooseWorkerPrecision(ClusterIn("fp16"), Profiles(true, true)).name, "fp16");
  EXPECT_EQ(ChooseWorkerPrecision(ClusterIn("fp32"), Profiles(false, false)).name, "fp32");
}

TEST(PrecisionChoice, Bf16OfADeviceWithoutItIsRefusedNamingIt) {
  EXPECT_EQ(ChooseWorkerPrecision(ClusterIn("bf16"), Profiles(true, std::nullopt)).name, "bf16");
  try {
    ChooseWorkerPrecision(ClusterIn("bf16"), Profiles(false, false));
    FAIL() << "bf16 on devices without it";
  } catch (const InputError& error) {
    EXPECT_EQ(error.file(), "cluster.yaml");
    EXPECT_EQ(error.key(), "training.precision");
    EXPECT_NE(error.reason().find("A, B have no bf16"), std::string::npos) << error.reason();
  }
}

}  // namespace
}  // namespace poplar
