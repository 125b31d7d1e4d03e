// Tests of profile files (planner/formats/profile.h): ProfileToJson and ParseProfileJson agree,
// every kind of bad profile is an InputError naming the file, key and reason, and
// LoadClusterProfiles finds and cross-checks the profiles of a cluster's device types.
#include "planner/formats/profile.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "planner/base/input_error.h"
#include "planner/cluster/cluster.h"
#include "planner/cluster/cluster_profiles.h"
#include "test_support.h"

namespace poplar {
namespace {

using Json = nlohmann::json;
using JsonEdit = std::function<void(Json&)>;

constexpr char kFile[] = "profiles/A100-80GB.json";

using testing::Contains;
using testing::ContainsAll;

// A profile with two stages of several points each, values chosen so that a field
// swapped or dropped on the way through JSON shows.
DeviceProfile SampleProfile(const std::string& type = "A100-80GB") {
  DeviceProfile profile;
  profile.device_type = type;
  profile.memory_bytes = 85899345920;  // 80 GiB, beyond 32 bits
  profile.emulated = true;
  profile.source = "measured on node-a: \"A100\" \\ 80GB / 2 runs, caf\xc3\xa9\tdone";
  profile.model = {"gpt2-medium", 354823168, Precision::kFp32, {}};
  StageProfile zero;
  zero.stage = 0;
  zero.world_size = 1;
  zero.max_micro_batch = 24;
  zero.optimizer_step_s = 0.011;
  zero.points = {{1, 0.031, 9100000000, 0.0071}, {2, 0.1 + 0.2, 9600000001}, {8, 0.2, 12884901888}};
  StageProfile three;
  three.stage = 3;
  three.world_size = 4;
  three.max_micro_batch = 1;
  three.optimizer_step_s = 0;
  three.points = {{1, 1.0 / 3.0, 4000000000}};
  profile.stages = {zero, three};
  return profile;
}

Json SampleJson() { return Json::parse(ProfileToJson(SampleProfile())); }

// The InputError that parsing `text` throws; fails the test if it parses.
InputError ParseError(const std::string& text) {
  try {
    ParseProfileJson(text, kFile);
    ADD_FAILURE() << "parsed without error:\n" << text;
  } catch (const InputError& error) {
    return error;
  }
  return InputError("<none>", "<none>", "<no error was thrown>");
}

// Expects the sample profile changed by `edit` to be rejected on `key` with a reason
// containing `reason_part`.
void ExpectRejected(const JsonEdit& edit, const std::string& key, const std::string& reason_part) {
  Json json = SampleJson();
  edit(json);
  const InputError error = ParseError(json.dump(2));
  EXPECT_EQ(error.file(), kFile);
  EXPECT_EQ(error.key(), key);
  EXPECT_TRUE(Contains(error.reason(), reason_part));
}

// ParseProfileJson(ProfileToJson(profile)), failing the test (not throwing) when the
// written text does not read back.
DeviceProfile RoundTrip(const DeviceProfile& profile) {
  const std::string text = ProfileToJson(profile);
  try {
    return ParseProfileJson(text, kFile);
  } catch (const InputError& error) {
    ADD_FAILURE() << "ProfileToJson wrote text that ParseProfileJson rejects: " << error.what() << "\n" << text;
  }
  return {};
}

// ---------------------------------------------------------------------------
// Round trip.

TEST(ProfileFile, RoundTripPreservesEveryField) {
  const DeviceProfile original = SampleProfile();
  const DeviceProfile parsed = RoundTrip(original);
  EXPECT_EQ(parsed.file, kFile);
  EXPECT_EQ(parsed.device_type, original.device_type);
  EXPECT_EQ(parsed.memory_bytes, original.memory_bytes);
  EXPECT_EQ(parsed.emulated, original.emulated);
  EXPECT_EQ(parsed.source, original.source);
  EXPECT_EQ(parsed.model.name, original.model.name);
  EXPECT_EQ(parsed.model.params, original.model.params);
  EXPECT_EQ(parsed.model.precision, original.model.precision);
  EXPECT_FALSE(parsed.model.config.has_value());  // optional, and absent here
  DeviceProfile with_config = original;
  with_config.model.config = ParseModelConfig(
      R"({"arch": "gpt", "n_layer": 24, "n_head": 16, "n_embd": 1024, "vocab_size": 50257, "block_size": 1024})", "m");
  EXPECT_EQ(RoundTrip(with_config).model.config, with_config.model.config);
  ASSERT_EQ(parsed.stages.size(), original.stages.size());
  for (std::size_t s = 0; s < original.stages.size(); ++s) {
    SCOPED_TRACE("stage entry " + std::to_string(s));
    const StageProfile& want = original.stages[s];
    const StageProfile& got = parsed.stages[s];
    EXPECT_EQ(got.stage, want.stage);
    EXPECT_EQ(got.world_size, want.world_size);
    EXPECT_EQ(got.max_micro_batch, want.max_micro_batch);
    EXPECT_EQ(got.optimizer_step_s, want.optimizer_step_s);
    ASSERT_EQ(got.points.size(), want.points.size());
    for (std::size_t p = 0; p < want.points.size(); ++p) {
      SCOPED_TRACE("point " + std::to_string(p));
      EXPECT_EQ(got.points[p].micro_batch, want.points[p].micro_batch);
      // Exact: a profile written and read back must plan identically.
      EXPECT_EQ(got.points[p].compute_s, want.points[p].compute_s);
      EXPECT_EQ(got.points[p].peak_bytes, want.points[p].peak_bytes);
      EXPECT_EQ(got.points[p].graph_compute_s, want.points[p].graph_compute_s);
    }
  }
}

TEST(ProfileFile, WritesGraphComputeOnlyWhereMeasured) {
  const Json json = SampleJson();
  EXPECT_EQ(json["stages"][0]["points"][0]["graph_compute_s"], 0.0071);
  EXPECT_FALSE(json["stages"][0]["points"][1].contains("graph_compute_s"));
  EXPECT_FALSE(json["stages"][1]["points"][0].contains("graph_compute_s"));
}

TEST(ProfileFile, RejectsAGraphComputeTimeOutOfRange) {
  ExpectRejected([](Json& j) { j["stages"][0]["points"][1]["graph_compute_s"] = 0; },
                 "stages[0].points[1].graph_compute_s", "must be a number of seconds from 1e-9");
  ExpectRejected([](Json& j) { j["stages"][0]["points"][0]["graph_compute_s"] = "fast"; },
                 "stages[0].points[0].graph_compute_s", "");
  // The sample's second entry is stage 3, which never replays.
  ExpectRejected([](Json& j) { j["stages"][1]["points"][0]["graph_compute_s"] = 0.1; },
                 "stages[1].points[0].graph_compute_s", "is for stages 0-1");
}

TEST(ProfileFile, RoundTripPreservesTheCollectivesOfAStage) {
  DeviceProfile original = SampleProfile();
  CollectiveParams collectives;
  collectives.all_gather_per_round = {612'000'000, 50};
  collectives.reduce_scatter_per_round = {354'823'168, 26};
  original.stages[1].collectives = collectives;
  const DeviceProfile parsed = RoundTrip(original);
  EXPECT_FALSE(parsed.stages[0].collectives.has_value());  // optional: absent stays absent
  ASSERT_TRUE(parsed.stages[1].collectives.has_value());
  const CollectiveParams& got = *parsed.stages[1].collectives;
  EXPECT_EQ(got.all_gather_per_round.params, 612'000'000);
  EXPECT_EQ(got.all_gather_per_round.calls, 50);
  EXPECT_EQ(got.reduce_scatter_per_round.params, 354'823'168);
  EXPECT_EQ(got.reduce_scatter_per_round.calls, 26);
  EXPECT_EQ(got.all_reduce_per_step.calls, 0);
}

TEST(ProfileFile, RejectsCollectivesWithoutCallsOrWithUnknownKeys) {
  const JsonEdit with_collectives = [](Json& j) {
    j["stages"][0]["collectives"] = Json::parse(R"({
      "all_reduce_per_step": {"params": 100, "calls": 1},
      "reduce_scatter_per_step": {"params": 0, "calls": 0},
      "all_gather_per_step": {"params": 0, "calls": 0},
      "reduce_scatter_per_round": {"params": 0, "calls": 0},
      "all_gather_per_round": {"params": 0, "calls": 0}})");
  };
  ExpectRejected(
      [&](Json& j) {
        with_collectives(j);
        j["stages"][0]["collectives"]["all_reduce_per_step"]["calls"] = 0;
      },
      "stages[0].collectives.all_reduce_per_step.calls", "positive exactly when params is");
  ExpectRejected(
      [&](Json& j) {
        with_collectives(j);
        j["stages"][0]["collectives"]["all_gather_per_round"]["params"] = -4;
      },
      "stages[0].collectives.all_gather_per_round.params", "from 0 to 4 x model.params");
  // Bounded by the model: 2^62 made a step of twenty years.
  ExpectRejected(
      [&](Json& j) {
        with_collectives(j);
        j["stages"][0]["collectives"]["all_reduce_per_step"]["params"] = std::int64_t{1} << 62;
      },
      "stages[0].collectives.all_reduce_per_step.params", "from 0 to 4 x model.params");
  ExpectRejected(
      [&](Json& j) {
        with_collectives(j);
        j["stages"][0]["collectives"].erase("all_gather_per_step");
      },
      "stages[0].collectives.all_gather_per_step", "required");
  ExpectRejected(
      [&](Json& j) {
        with_collectives(j);
        j["stages"][0]["collectives"]["broadcast_per_step"] = Json::object();
      },
      "stages[0].collectives.broadcast_per_step", "unknown key");
}

TEST(ProfileFile, RoundTripPreservesFalseEmulatedAndMixedPrecision) {
  DeviceProfile original = SampleProfile();
  original.emulated = false;
  original.model.precision = Precision::kMixed;
  const DeviceProfile parsed = RoundTrip(original);
  EXPECT_FALSE(parsed.emulated);
  EXPECT_EQ(parsed.model.precision, Precision::kMixed);
}

TEST(ProfileFile, RoundTripPreservesEmptySource) {
  // source is optional and defaults to "", so a profile without one must read back.
  DeviceProfile original = SampleProfile();
  original.source = "";
  const DeviceProfile parsed = RoundTrip(original);
  EXPECT_EQ(parsed.source, "");
  EXPECT_EQ(parsed.device_type, original.device_type);
}

TEST(ProfileFile, RoundTripPreservesEmptyModelName) {
  // model.name is optional and defaults to "", so a profile without one must read back.
  DeviceProfile original = SampleProfile();
  original.model.name = "";
  const DeviceProfile parsed = RoundTrip(original);
  EXPECT_EQ(parsed.model.name, "");
  EXPECT_EQ(parsed.model.params, original.model.params);
}

TEST(ProfileFile, WritesTheDocumentedFormat) {
  const Json json = SampleJson();
  EXPECT_EQ(json["format"], "poplar-profile/1");
  EXPECT_EQ(json["device_type"], "A100-80GB");
  EXPECT_EQ(json["memory_bytes"], 85899345920);
  EXPECT_EQ(json["emulated"], true);
  EXPECT_EQ(json["model"]["params"], 354823168);
  EXPECT_EQ(json["model"]["precision"], "fp32");
  EXPECT_EQ(json["stages"][0]["points"][2]["micro_batch"], 8);
  EXPECT_EQ(json["stages"][1]["world_size"], 4);
}

TEST(ProfileFile, OptionalKeysTakeDefaults) {
  Json json = SampleJson();
  json.erase("emulated");
  json.erase("source");
  json["model"].erase("name");
  json["stages"][1].erase("world_size");
  const DeviceProfile parsed = ParseProfileJson(json.dump(), kFile);
  EXPECT_FALSE(parsed.emulated);
  EXPECT_EQ(parsed.source, "");
  EXPECT_EQ(parsed.model.name, "");
  ASSERT_EQ(parsed.stages.size(), 2u);
  EXPECT_EQ(parsed.stages[1].world_size, 1);
}

TEST(ProfileFile, StageFindsMeasurementsByStageNumber) {
  const DeviceProfile parsed = ParseProfileJson(ProfileToJson(SampleProfile()), kFile);
  ASSERT_NE(parsed.Stage(0), nullptr);
  EXPECT_EQ(parsed.Stage(0)->max_micro_batch, 24);
  ASSERT_NE(parsed.Stage(3), nullptr);
  EXPECT_EQ(parsed.Stage(3)->world_size, 4);
  EXPECT_EQ(parsed.Stage(1), nullptr);
  EXPECT_EQ(parsed.Stage(2), nullptr);
}

// ---------------------------------------------------------------------------
// Whole-file errors.

TEST(ProfileFile, RejectsTextThatIsNotJson) {
  for (const std::string text : {"{not json", "", "format: poplar-profile/1\n", "{\"a\": 1} {}"}) {
    SCOPED_TRACE(text);
    const InputError error = ParseError(text);
    EXPECT_EQ(error.file(), kFile);
    EXPECT_EQ(error.key(), "");
    EXPECT_TRUE(Contains(error.reason(), "not valid JSON"));
  }
}

TEST(ProfileFile, RejectsJsonThatIsNotAnObject) {
  for (const std::string text : {"[1, 2]", "42", "\"profile\""}) {
    SCOPED_TRACE(text);
    const InputError error = ParseError(text);
    EXPECT_EQ(error.file(), kFile);
    EXPECT_EQ(error.key(), "");
    EXPECT_TRUE(Contains(error.reason(), "must be a JSON object"));
  }
}

TEST(ProfileFile, AcceptsJsonIndentedWithTabs) {
  // Valid JSON stays valid however it is laid out.
  std::string text = ProfileToJson(SampleProfile());
  for (std::size_t at = text.find("\n  "); at != std::string::npos; at = text.find("\n  ", at)) {
    text.replace(at, 3, "\n\t");
  }
  try {
    EXPECT_EQ(ParseProfileJson(text, kFile).device_type, "A100-80GB");
  } catch (const InputError& error) {
    ADD_FAILURE() << "rejected: " << error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "not an InputError: " << error.what();
  }
}

TEST(ProfileFile, AcceptsEveryJsonStringEscape) {
  // Python's json.dump escapes non-ASCII text by default, characters outside the Basic
  // Multilingual Plane as surrogate pairs; all of it is valid JSON.
  Json json = SampleJson();
  json["source"] = "@SOURCE@";
  std::string text = json.dump();
  text.replace(text.find("@SOURCE@"), 8, R"(caf\u00e9 a\/b \ud83d\ude00)");
  try {
    EXPECT_EQ(ParseProfileJson(text, kFile).source, "caf\xc3\xa9 a/b \xf0\x9f\x98\x80");
  } catch (const InputError& error) {
    ADD_FAILURE() << "rejected: " << error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "not an InputError: " << error.what();
  }
}

TEST(ProfileFile, RejectsWrongFormat) {
  ExpectRejected([](Json& j) { j["format"] = "poplar-profile/2"; }, "format",
                 "must be \"poplar-profile/1\", got \"poplar-profile/2\"");
  ExpectRejected([](Json& j) { j.erase("format"); }, "format", "is required");
}

TEST(ProfileFile, RejectsUnknownTopLevelKey) {
  const Json edited = [] {
    Json j = SampleJson();
    j["colour"] = "red";
    return j;
  }();
  const InputError error = ParseError(edited.dump());
  EXPECT_EQ(error.key(), "colour");
  EXPECT_TRUE(ContainsAll(error.reason(), {"unknown key", "device_type", "stages"}));
}

TEST(ProfileFile, RejectsMissingDeviceType) {
  ExpectRejected([](Json& j) { j.erase("device_type"); }, "device_type", "is required");
  ExpectRejected([](Json& j) { j["device_type"] = ""; }, "device_type", "must not be empty");
}

TEST(ProfileFile, RejectsNegativeMemory) {
  ExpectRejected([](Json& j) { j["memory_bytes"] = -1; }, "memory_bytes", "must be a positive number of bytes");
}

TEST(ProfileFile, RejectsZeroMemory) {
  ExpectRejected([](Json& j) { j["memory_bytes"] = 0; }, "memory_bytes", "must be a positive number of bytes");
}

// Byte counts are integers: a float such as 1e300 has no int64 value.
TEST(ProfileFile, RejectsByteCountsThatAreNotIntegers) {
  ExpectRejected([](Json& j) { j["memory_bytes"] = 1e300; }, "memory_bytes", "is too large for an integer");
  ExpectRejected([](Json& j) { j["memory_bytes"] = 8.5e9; }, "memory_bytes", "must be an integer");
  ExpectRejected([](Json& j) { j["stages"][1]["points"][0]["peak_bytes"] = 1.5e9; }, "stages[1].points[0].peak_bytes",
                 "must be an integer");
}

TEST(ProfileFile, RejectsEmulatedThatIsNotBoolean) {
  ExpectRejected([](Json& j) { j["emulated"] = "yes"; }, "emulated", "must be true or false");
  ExpectRejected([](Json& j) { j["emulated"] = 1; }, "emulated", "must be true or false");
  ExpectRejected([](Json& j) { j["emulated"] = Json::array({true}); }, "emulated", "must be");
}

TEST(ProfileFile, RejectsEmulatedGivenAsString) {
  // "true" in quotes is a JSON string, not a boolean.
  ExpectRejected([](Json& j) { j["emulated"] = "true"; }, "emulated", "must be true or false");
}

// ---------------------------------------------------------------------------
// The model.

TEST(ProfileFile, RejectsUnknownModelPrecision) {
  ExpectRejected([](Json& j) { j["model"]["precision"] = "int8"; }, "model.precision",
                 "must be fp32 or mixed, got 'int8'");
  ExpectRejected([](Json& j) { j["model"].erase("precision"); }, "model.precision", "is required");
}

TEST(ProfileFile, RejectsNonPositiveParameterCount) {
  ExpectRejected([](Json& j) { j["model"]["params"] = 0; }, "model.params", "must be a positive parameter count");
  ExpectRejected([](Json& j) { j["model"]["params"] = -354823168; }, "model.params",
                 "must be a positive parameter count");
  ExpectRejected([](Json& j) { j["model"]["params"] = 3.5; }, "model.params", "must be an integer");
}

TEST(ProfileFile, RejectsMissingModel) {
  ExpectRejected([](Json& j) { j.erase("model"); }, "model", "is required");
}

// ---------------------------------------------------------------------------
// Stages and points.

TEST(ProfileFile, RejectsMissingOrEmptyStages) {
  ExpectRejected([](Json& j) { j.erase("stages"); }, "stages", "is required");
  // A misspelt list is named where its absence is.
  ExpectRejected(
      [](Json& j) {
        j["stagse"] = j["stages"];
        j.erase("stages");
      },
      "stages", "found 'stagse'");
  ExpectRejected([](Json& j) { j["stages"] = Json::array(); }, "stages", "must be a non-empty list");
}

TEST(ProfileFile, RejectsStageOutOfRange) {
  ExpectRejected([](Json& j) { j["stages"][0]["stage"] = 5; }, "stages[0].stage", "must be a ZeRO stage from 0 to 3");
  ExpectRejected([](Json& j) { j["stages"][1]["stage"] = -1; }, "stages[1].stage", "must be a ZeRO stage from 0 to 3");
}

TEST(ProfileFile, RejectsDuplicateStage) {
  ExpectRejected([](Json& j) { j["stages"][1]["stage"] = 0; }, "stages[1].stage", "stage 0 appears twice");
}

TEST(ProfileFile, RejectsWorldSizeOutOfRange) {
  ExpectRejected([](Json& j) { j["stages"][1]["world_size"] = 0; }, "stages[1].world_size",
                 "must be a number of ranks from 1 to 1000000");
  ExpectRejected([](Json& j) { j["stages"][1]["world_size"] = std::int64_t{1} << 40; }, "stages[1].world_size",
                 "from 1 to 1000000");  // not cast to int unchecked
}

TEST(ProfileFile, RoundTripPreservesTheStateShareOfAStage) {
  DeviceProfile profile = SampleProfile();
  EXPECT_FALSE(RoundTrip(profile).stages[1].state_share.has_value());  // absent: 1/world_size
  EXPECT_DOUBLE_EQ(RoundTrip(profile).stages[1].HeldShare(), 0.25);
  profile.stages[1].world_size = 1;
  profile.stages[1].state_share = 1.0 / 64;
  const DeviceProfile parsed = RoundTrip(profile);
  ASSERT_TRUE(parsed.stages[1].state_share.has_value());
  EXPECT_EQ(*parsed.stages[1].state_share, 1.0 / 64);
  EXPECT_EQ(parsed.stages[1].HeldShare(), 1.0 / 64);
}

TEST(ProfileFile, RejectsAStateShareOutsideItsRangeOrAtStageZero) {
  ExpectRejected([](Json& j) { j["stages"][1]["state_share"] = 0; }, "stages[1].state_share",
                 "fraction of the partitioned state in (0, 1], got 0");
  ExpectRejected([](Json& j) { j["stages"][1]["state_share"] = 1.5; }, "stages[1].state_share",
                 "fraction of the partitioned state in (0, 1], got 1.5");
  ExpectRejected([](Json& j) { j["stages"][1]["state_share"] = "half"; }, "stages[1].state_share", "number");
  ExpectRejected([](Json& j) { j["stages"][0]["state_share"] = 0.5; }, "stages[0].state_share",
                 "stage 0 partitions no state");
}

TEST(ProfileFile, RoundTripPreservesTheCollectiveElementsInFlight) {
  DeviceProfile profile = SampleProfile();
  EXPECT_EQ(RoundTrip(profile).stages[1].collective_elements_in_flight, 0);  // absent: 0
  EXPECT_FALSE(SampleJson()["stages"][1].contains("collective_elements_in_flight"));
  profile.stages[1].collective_elements_in_flight = 4 * 354823168LL;  // the most allowed
  EXPECT_EQ(RoundTrip(profile).stages[1].collective_elements_in_flight, 4 * 354823168LL);
}

TEST(ProfileFile, RejectsCollectiveElementsInFlightOutsideTheirRange) {
  ExpectRejected([](Json& j) { j["stages"][1]["collective_elements_in_flight"] = -1; },
                 "stages[1].collective_elements_in_flight", "a number of elements from 0 to 1419292672, got -1");
  ExpectRejected([](Json& j) { j["stages"][1]["collective_elements_in_flight"] = 1419292673; },
                 "stages[1].collective_elements_in_flight", "from 0 to 1419292672, got 1419292673");
  ExpectRejected([](Json& j) { j["stages"][1]["collective_elements_in_flight"] = 2.5; },
                 "stages[1].collective_elements_in_flight", "must be an integer");
  ExpectRejected([](Json& j) { j["stages"][0]["collective_elements_in_flight"] = 8; },
                 "stages[0].collective_elements_in_flight", "stage 0 runs no reduce-scatter or all-gather");
}

TEST(ProfileFile, RejectsNegativeMaxMicroBatch) {
  ExpectRejected([](Json& j) { j["stages"][0]["max_micro_batch"] = -1; }, "stages[0].max_micro_batch",
                 "must be a number of samples from 0 to 1000000");
}

TEST(ProfileFile, RejectsAMaxMicroBatchBelowAMeasuredPoint) {
  // Stage 0's last point is micro-batch 8: it ran, so at least 8 fits.
  ExpectRejected([](Json& j) { j["stages"][0]["max_micro_batch"] = 7; }, "stages[0].max_micro_batch",
                 "is 7 but micro-batch 8 was measured");
  ExpectRejected([](Json& j) { j["stages"][1]["max_micro_batch"] = 0; }, "stages[1].max_micro_batch",
                 "is 0 but micro-batch 1 was measured");
  EXPECT_EQ(ParseProfileJson(
                [] {
                  Json j = SampleJson();
                  j["stages"][0]["max_micro_batch"] = 8;
                  return j.dump();
                }(),
                kFile)
                .Stage(0)
                ->max_micro_batch,
            8);
}

TEST(ProfileFile, RejectsNegativeOptimizerStep) {
  ExpectRejected([](Json& j) { j["stages"][0]["optimizer_step_s"] = -0.5; }, "stages[0].optimizer_step_s",
                 "must be a number of seconds from 0 to 86400");
}

TEST(ProfileFile, KeepsTheOptimizersFixedPartWithinItsStep) {
  Json json = SampleJson();
  json["stages"][1]["optimizer_step_s"] = 0.004;
  json["stages"][1]["optimizer_fixed_s"] = 0.001;
  const DeviceProfile parsed = ParseProfileJson(json.dump(), kFile);
  EXPECT_EQ(parsed.Stage(3)->optimizer_fixed_s, 0.001);
  EXPECT_FALSE(parsed.Stage(0)->optimizer_fixed_s.has_value());  // absent
  EXPECT_EQ(ParseProfileJson(ProfileToJson(parsed), kFile).Stage(3)->optimizer_fixed_s, 0.001);
  ExpectRejected(
      [](Json& j) {
        j["stages"][1]["optimizer_step_s"] = 0.004;
        j["stages"][1]["optimizer_fixed_s"] = 0.005;
      },
      "stages[1].optimizer_fixed_s", "from 0 to optimizer_step_s");
  ExpectRejected([](Json& j) { j["stages"][0]["optimizer_fixed_s"] = 0.001; }, "stages[0].optimizer_fixed_s",
                 "stage 0 updates every parameter");
}

// Times beyond a day are typing mistakes: 1e308 s printed steps of 1e308 s.
TEST(ProfileFile, RejectsTimesBeyondADay) {
  ExpectRejected([](Json& j) { j["stages"][0]["optimizer_step_s"] = 1e300; }, "stages[0].optimizer_step_s",
                 "from 0 to 86400");
  ExpectRejected([](Json& j) { j["stages"][1]["points"][0]["compute_s"] = 1e308; }, "stages[1].points[0].compute_s",
                 "from 1e-9 to 86400");
}

TEST(ProfileFile, RejectsEmptyPoints) {
  ExpectRejected([](Json& j) { j["stages"][0]["points"] = Json::array(); }, "stages[0].points",
                 "must be a non-empty list");
  ExpectRejected([](Json& j) { j["stages"][1].erase("points"); }, "stages[1].points", "is required");
}

TEST(ProfileFile, RejectsUnknownKeyInPoint) {
  ExpectRejected([](Json& j) { j["stages"][0]["points"][1]["flops"] = 1e12; }, "stages[0].points[1].flops",
                 "unknown key");
}

TEST(ProfileFile, RejectsUnknownKeyInStage) {
  ExpectRejected([](Json& j) { j["stages"][1]["warmup"] = 3; }, "stages[1].warmup", "unknown key");
}

TEST(ProfileFile, RejectsNonPositiveComputeTime) {
  ExpectRejected([](Json& j) { j["stages"][0]["points"][0]["compute_s"] = 0; }, "stages[0].points[0].compute_s",
                 "must be a number of seconds from 1e-9");
  ExpectRejected([](Json& j) { j["stages"][0]["points"][2]["compute_s"] = -0.1; }, "stages[0].points[2].compute_s",
                 "must be a number of seconds from 1e-9");
}

TEST(ProfileFile, RejectsNonPositivePeakBytes) {
  ExpectRejected([](Json& j) { j["stages"][1]["points"][0]["peak_bytes"] = 0; }, "stages[1].points[0].peak_bytes",
                 "must be a positive number of bytes");
  ExpectRejected([](Json& j) { j["stages"][1]["points"][0]["peak_bytes"] = j["memory_bytes"].get<std::int64_t>() + 1; },
                 "stages[1].points[0].peak_bytes", "above memory_bytes");
}

TEST(ProfileFile, RejectsNonPositiveMicroBatch) {
  ExpectRejected([](Json& j) { j["stages"][0]["points"][0]["micro_batch"] = 0; }, "stages[0].points[0].micro_batch",
                 "must be a number of samples from 1 to 1000000");
}

TEST(ProfileFile, RejectsPointsOutOfMicroBatchOrder) {
  // A repeated micro-batch is out of order too.
  ExpectRejected([](Json& j) { j["stages"][0]["points"][1]["micro_batch"] = 1; }, "stages[0].points[1].micro_batch",
                 "increasing micro_batch order");
  ExpectRejected([](Json& j) { j["stages"][0]["points"][2]["micro_batch"] = 2; }, "stages[0].points[2].micro_batch",
                 "increasing micro_batch order");
  ExpectRejected(
      [](Json& j) {
        auto& points = j["stages"][0]["points"];
        std::swap(points[0], points[2]);
      },
      "stages[0].points[1].micro_batch", "increasing micro_batch order");
}

// ---------------------------------------------------------------------------
// Files on disk and LoadClusterProfiles.

class ProfileFiles : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) { return scratch_.Write(name, text); }
  // Writes `profile` as <file_type>.json (by default, named after its device type).
  std::string WriteProfile(const DeviceProfile& profile, std::string file_type = "") {
    if (file_type.empty()) file_type = profile.device_type;
    return Write(file_type + ".json", ProfileToJson(profile));
  }

  // A two-node fp32 cluster of A100-80GB and T4-16GB, read from a file in dir_; `more`
  // is appended to the file.
  ClusterSpec Cluster(const std::string& more = "") {
    const std::string path = Write("cluster.yaml", R"(training: {global_batch: 64, precision: fp32}
network:
  inter_node: {bandwidth_gbps: 100, latency_us: 20}
nodes:
  - name: a
    devices: [{type: A100-80GB, count: 1}]
  - name: b
    devices: [{type: T4-16GB, count: 1}]
)" + more);
    return LoadClusterFile(path);
  }

  // Cluster() with a job whose model, written to dir_, has `vocab_size` tokens: 50257
  // gives GPT-2 medium's 354823168 parameters, SampleProfile's count.
  ClusterSpec ClusterWithJob(int vocab_size) {
    Write("model.json", R"({"arch": "gpt", "n_layer": 24, "n_head": 16, "n_embd": 1024, "vocab_size": )" +
                            std::to_string(vocab_size) + R"(, "block_size": 1024})");
    return Cluster("job: {model: model.json, data: tokens.bin, steps: 10}\n");
  }

  // The InputError LoadClusterProfiles throws for `cluster`; fails the test if none.
  InputError LoadError(const ClusterSpec& cluster) {
    try {
      LoadClusterProfiles(cluster, dir_);
      ADD_FAILURE() << "loaded without error";
    } catch (const InputError& error) {
      return error;
    }
    return InputError("<none>", "<none>", "<no error was thrown>");
  }

  testing::ScratchDir scratch_{"poplar_profile_test"};
  const std::string dir_ = scratch_.path();
};

TEST_F(ProfileFiles, LoadsWrittenProfile) {
  const std::string path = WriteProfile(SampleProfile());
  const DeviceProfile loaded = LoadProfileFile(path);
  EXPECT_EQ(loaded.file, path);
  EXPECT_EQ(loaded.device_type, "A100-80GB");
  EXPECT_EQ(loaded.stages.size(), 2u);
}

TEST_F(ProfileFiles, ErrorsNameTheLoadedPath) {
  Json json = SampleJson();
  json["stages"][0]["points"][1]["compute_s"] = -1;
  const std::string path = Write("A100-80GB.json", json.dump());
  try {
    LoadProfileFile(path);
    FAIL() << "loaded without error";
  } catch (const InputError& error) {
    EXPECT_EQ(error.file(), path);
    EXPECT_EQ(error.key(), "stages[0].points[1].compute_s");
    EXPECT_EQ(std::string(error.what()),
              path + ": stages[0].points[1].compute_s: must be a number of seconds from 1e-9 to 86400, got -1");
  }
}

// A time below a nanosecond is no measurement: a subnormal one (5e-324) made a
// micro-batch free, and the search then planned twice the global batch.
TEST_F(ProfileFiles, RefusesTimesBelowANanosecond) {
  for (const double seconds : {5e-324, 1e-320, 9e-10}) {
    Json json = SampleJson();
    json["stages"][0]["points"][0]["compute_s"] = seconds;
    const std::string path = Write("A100-80GB.json", json.dump());
    try {
      LoadProfileFile(path);
      FAIL() << seconds << " was accepted";
    } catch (const InputError& error) {
      EXPECT_EQ(error.key(), "stages[0].points[0].compute_s") << seconds;
    }
  }
  Json json = SampleJson();
  json["stages"][0]["points"][0]["compute_s"] = 1e-9;
  EXPECT_NO_THROW(LoadProfileFile(Write("A100-80GB.json", json.dump())));
}

TEST_F(ProfileFiles, RejectsMissingFile) {
  const std::string path = dir_ + "/none.json";
  try {
    LoadProfileFile(path);
    FAIL() << "loaded without error";
  } catch (const InputError& error) {
    EXPECT_EQ(error.file(), path);
    EXPECT_EQ(error.key(), "");
    EXPECT_TRUE(Contains(error.reason(), "cannot read"));
  }
}

// A pipe (or a folder) where a profile should be is named, without opening the pipe,
// which would wait for a writer forever.
TEST_F(ProfileFiles, APipeWhereAProfileShouldBeIsRefusedNotOpened) {
  WriteProfile(SampleProfile("A100-80GB"));
  ASSERT_EQ(::mkfifo((dir_ + "/T4-16GB.json").c_str(), 0600), 0);
  const InputError error = LoadError(Cluster());
  EXPECT_EQ(error.file(), dir_ + "/T4-16GB.json");
  EXPECT_TRUE(Contains(error.reason(), "is not a regular file")) << error.what();
}

TEST_F(ProfileFiles, LoadsOneProfilePerDeviceType) {
  const std::string a100 = WriteProfile(SampleProfile("A100-80GB"));
  const std::string t4 = WriteProfile(SampleProfile("T4-16GB"));
  const auto profiles = LoadClusterProfiles(Cluster(), dir_);
  ASSERT_EQ(profiles.size(), 2u);
  EXPECT_EQ(profiles.at("A100-80GB").file, a100);
  EXPECT_EQ(profiles.at("A100-80GB").device_type, "A100-80GB");
  EXPECT_EQ(profiles.at("T4-16GB").file, t4);
  EXPECT_EQ(profiles.at("T4-16GB").model.params, 354823168);
}

TEST_F(ProfileFiles, IgnoresProfilesOfTypesNotInTheCluster) {
  WriteProfile(SampleProfile("A100-80GB"));
  WriteProfile(SampleProfile("T4-16GB"));
  WriteProfile(SampleProfile("H100-80GB"));
  EXPECT_EQ(LoadClusterProfiles(Cluster(), dir_).count("H100-80GB"), 0u);
}

TEST_F(ProfileFiles, RejectsDeviceTypeWithoutProfile) {
  WriteProfile(SampleProfile("A100-80GB"));
  const ClusterSpec cluster = Cluster();
  const InputError error = LoadError(cluster);
  EXPECT_EQ(error.file(), cluster.file);
  EXPECT_EQ(error.key(), "nodes[1].devices[0].type");  // where the file names the type
  EXPECT_TRUE(ContainsAll(error.reason(), {"T4-16GB", dir_ + "/T4-16GB.json", "the folder has profiles of A100-80GB"}))
      << error.reason();
}

TEST_F(ProfileFiles, AMisspeltDeviceTypeIsToldTheNearestProfile) {
  WriteProfile(SampleProfile("A100-80GB"));
  WriteProfile(SampleProfile("T4-16GB"));
  const ClusterSpec cluster = LoadClusterFile(Write("typo.yaml", R"(training: {global_batch: 64, precision: fp32}
network:
  intra_node: {bandwidth_gbps: 2400, latency_us: 5}
nodes:
  - name: a
    devices: [{type: A100-80GB, count: 1}, {type: T4-16G, count: 2}]
)"));
  const InputError error = LoadError(cluster);
  EXPECT_EQ(error.key(), "nodes[0].devices[1].type");
  EXPECT_TRUE(Contains(error.reason(), "did you mean T4-16GB?")) << error.reason();
}

TEST_F(ProfileFiles, RejectsProfileForAnotherDeviceType) {
  WriteProfile(SampleProfile("A100-80GB"));
  const std::string path = WriteProfile(SampleProfile("V100-16GB"), "T4-16GB");
  const InputError error = LoadError(Cluster());
  EXPECT_EQ(error.file(), path);
  EXPECT_EQ(error.key(), "device_type");
  EXPECT_TRUE(ContainsAll(error.reason(), {"V100-16GB", "T4-16GB"}));
}

TEST_F(ProfileFiles, RejectsPrecisionDifferentFromCluster) {
  DeviceProfile mixed = SampleProfile("A100-80GB");
  mixed.model.precision = Precision::kMixed;
  const std::string path = WriteProfile(mixed);
  WriteProfile(SampleProfile("T4-16GB"));
  const ClusterSpec cluster = Cluster();
  const InputError error = LoadError(cluster);
  EXPECT_EQ(error.file(), path);
  EXPECT_EQ(error.key(), "model.precision");
  EXPECT_TRUE(ContainsAll(error.reason(), {"mixed", "fp32", cluster.file}));
}

TEST_F(ProfileFiles, RejectsProfilesOfDifferentModels) {
  const std::string first = WriteProfile(SampleProfile("A100-80GB"));
  DeviceProfile other = SampleProfile("T4-16GB");
  other.model.params = 124439808;
  const std::string second = WriteProfile(other);
  const InputError error = LoadError(Cluster());
  EXPECT_EQ(error.file(), second);
  EXPECT_EQ(error.key(), "model.params");
  EXPECT_TRUE(ContainsAll(error.reason(), {"124439808", "354823168", first}));
}

// Without a job to compare with, profiles that record their models must still agree on
// them: a parameter count alone does not fix the model's shape.
TEST_F(ProfileFiles, RejectsProfilesOfModelsOfOneSizeButOtherShapes) {
  ModelConfig sixteen_heads;
  sixteen_heads.n_layer = 24;
  sixteen_heads.n_head = 16;
  sixteen_heads.n_embd = 1024;
  sixteen_heads.vocab_size = 50257;
  sixteen_heads.block_size = 1024;
  ModelConfig eight_heads = sixteen_heads;
  eight_heads.n_head = 8;
  DeviceProfile a100 = SampleProfile("A100-80GB");
  a100.model.config = sixteen_heads;
  const std::string first = WriteProfile(a100);
  DeviceProfile t4 = SampleProfile("T4-16GB");
  t4.model.config = eight_heads;
  const std::string second = WriteProfile(t4);
  const InputError error = LoadError(Cluster());
  EXPECT_EQ(error.file(), second);
  EXPECT_EQ(error.key(), "model.config");
  EXPECT_TRUE(ContainsAll(error.reason(), {"\"n_head\":8", "\"n_head\":16", first})) << error.reason();
  t4.model.config.reset();  // a profile that does not say is held to the count alone
  WriteProfile(t4);
  EXPECT_EQ(LoadClusterProfiles(Cluster(), dir_).size(), 2u);
}

TEST_F(ProfileFiles, AcceptsProfilesOfTheJobsModel) {
  WriteProfile(SampleProfile("A100-80GB"));
  WriteProfile(SampleProfile("T4-16GB"));
  EXPECT_EQ(LoadClusterProfiles(ClusterWithJob(50257), dir_).size(), 2u);
}

TEST_F(ProfileFiles, RejectsProfilesOfAnotherModelThanTheJobs) {
  const std::string first = WriteProfile(SampleProfile("A100-80GB"));
  WriteProfile(SampleProfile("T4-16GB"));
  // GPT-2 medium padded to a vocabulary of 50304: 47 x 1024 more parameters.
  const InputError error = LoadError(ClusterWithJob(50304));
  EXPECT_EQ(error.file(), first);
  EXPECT_EQ(error.key(), "model.params");
  EXPECT_TRUE(ContainsAll(error.reason(), {"354823168", "354871296", dir_ + "/model.json", "poplar profile"}))
      << error.reason();
}

// Profiles that record their model's configuration must have measured the job's very
// model: one of the same size with other heads has other activation memory.
TEST_F(ProfileFiles, RejectsAProfileOfAnotherModelOfTheSameSize) {
  ModelConfig measured;
  measured.n_layer = 24;
  measured.n_head = 8;  // the job's has 16: the same parameters
  measured.n_embd = 1024;
  measured.vocab_size = 50257;
  measured.block_size = 1024;
  DeviceProfile a100 = SampleProfile("A100-80GB");
  a100.model.config = measured;
  const std::string path = WriteProfile(a100);
  WriteProfile(SampleProfile("T4-16GB"));
  const InputError error = LoadError(ClusterWithJob(50257));
  EXPECT_EQ(error.file(), path);
  EXPECT_EQ(error.key(), "model.config");
  EXPECT_TRUE(ContainsAll(error.reason(), {"\"n_head\":8", "\"n_head\":16", dir_ + "/model.json"})) << error.reason();

  a100.model.config->n_head = 16;
  WriteProfile(a100);
  EXPECT_EQ(LoadClusterProfiles(ClusterWithJob(50257), dir_).at("A100-80GB").model.config, a100.model.config);
}

TEST(ProfileFile, AModelConfigMustCountTheParamsGiven) {
  Json json = SampleJson();
  json["model"]["config"] = Json::parse(
      R"({"arch": "gpt", "n_layer": 24, "n_head": 16, "n_embd": 1024, "vocab_size": 50257, "block_size": 1024})");
  EXPECT_EQ(ParseProfileJson(json.dump(), kFile).model.config->n_head, 16);  // 354823168: agrees
  json["model"]["config"]["n_layer"] = 12;
  const InputError error = ParseError(json.dump());
  EXPECT_EQ(error.key(), "model.params");
  EXPECT_TRUE(Contains(error.reason(), "but model.config has")) << error.reason();
  json["model"]["config"]["n_head"] = 7;
  EXPECT_EQ(ParseError(json.dump()).key(), "model.config.n_embd");
}

TEST_F(ProfileFiles, ReportsInvalidProfileByItsOwnPath) {
  WriteProfile(SampleProfile("A100-80GB"));
  const std::string path = Write("T4-16GB.json", "{\"format\": ");
  const InputError error = LoadError(Cluster());
  EXPECT_EQ(error.file(), path);
  EXPECT_TRUE(Contains(error.reason(), "not valid JSON"));
}

// The shipped profiles are of configs/models/gpt2-medium.json, whole: a cluster whose
// job trains that model plans from them (the model's vocabulary is nanoGPT's 50304, not
// GPT-2's own 50257).
TEST(ProfileExamples, ShippedExampleProfilesLoadForTheirClusters) {
  const ModelConfig gpt2_medium = LoadModelConfig(std::string(POPLAR_SOURCE_DIR) + "/configs/models/gpt2-medium.json");
  for (const std::string name : {"a100-80-and-40", "a800-and-v100s", "v100-and-t4"}) {
    SCOPED_TRACE(name);
    const ClusterSpec cluster = LoadClusterFile(std::string(POPLAR_SOURCE_DIR) + "/configs/" + name + ".yaml");
    const auto profiles = LoadClusterProfiles(cluster, cluster.profiles_dir);
    ASSERT_EQ(profiles.size(), 2u);
    for (const auto& [type, profile] : profiles) {
      EXPECT_EQ(profile.device_type, type);
      EXPECT_EQ(profile.model.params, gpt2_medium.ParameterCount());
      EXPECT_EQ(profile.model.config, gpt2_medium);
      EXPECT_EQ(profile.model.precision, cluster.precision);
      EXPECT_NE(profile.Stage(0), nullptr);
    }
  }
}

}  // namespace
}  // namespace poplar
