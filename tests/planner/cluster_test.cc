// Tests of the cluster file parser (planner/cluster/cluster.h): the values a valid file
// produces, and for every kind of bad input an InputError naming the file, the key
// and the reason (docs/formats.md, cluster file).
#include "planner/cluster/cluster.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "planner/base/input_error.h"
#include "test_support.h"

namespace poplar {
namespace {

using testing::Contains;
using testing::ContainsAll;

::testing::AssertionResult StartsWith(const std::string& text, const std::string& prefix) {
  if (text.compare(0, prefix.size(), prefix) == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not start with '" << prefix << "'";
}

constexpr char kFile[] = "configs/lab/cluster.yaml";

// Two nodes, three device types, every optional key given. Tests derive bad files from
// it with Replaced(), so each error test changes exactly one thing.
constexpr char kValidCluster[] = R"(name: lab
profiles: profiles/lab
training:
  global_batch: 512
  precision: mixed
  stage: auto
network:
  intra_node: {bandwidth_gbps: 2400, latency_us: 5}
  inter_node: {bandwidth_gbps: 100, latency_us: 20}
nodes:
  - name: node-a
    host: 10.0.0.1
    devices:
      - {type: A100-80GB, count: 2}
      - {type: V100-16GB, count: 1}
  - name: node-b
    devices:
      - {type: T4-16GB, count: 3}
      - {type: A100-80GB, count: 1}
)";

// One node with one device: no network section is needed.
constexpr char kSingleDeviceCluster[] = R"(training:
  global_batch: 8
nodes:
  - name: solo
    devices:
      - {type: T4-16GB, count: 1}
)";

// `text` with the first occurrence of `from` replaced by `to`; fails the test if
// `from` is not there, so a typo in a test cannot silently test the valid file.
std::string Replaced(const std::string& text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  if (at == std::string::npos) {
    ADD_FAILURE() << "'" << from << "' is not in the cluster text";
    return text;
  }
  std::string result = text;
  result.replace(at, from.size(), to);
  return result;
}

std::string ValidWith(const std::string& from, const std::string& to) { return Replaced(kValidCluster, from, to); }

// The InputError that parsing `text` throws; fails the test if it parses.
InputError ParseError(const std::string& text, const std::string& file = kFile) {
  try {
    const ClusterSpec cluster = ParseClusterYaml(text, file);
    ADD_FAILURE() << "parsed without error:\n" << text;
  } catch (const InputError& error) {
    return error;
  }
  return InputError("<none>", "<none>", "<no error was thrown>");
}

// Expects parsing `text` to fail on `key` with a reason containing `reason_part`.
void ExpectRejected(const std::string& text, const std::string& key, const std::string& reason_part) {
  const InputError error = ParseError(text);
  EXPECT_EQ(error.file(), kFile);
  EXPECT_EQ(error.key(), key);
  EXPECT_TRUE(Contains(error.reason(), reason_part));
}

constexpr double kGbps = 1e9 / 8;  // bytes per second in one gigabit per second

// ---------------------------------------------------------------------------
// Valid files.

TEST(ClusterFile, ParsesTrainingSection) {
  const ClusterSpec cluster = ParseClusterYaml(kValidCluster, kFile);
  EXPECT_EQ(cluster.file, kFile);
  EXPECT_EQ(cluster.name, "lab");
  EXPECT_EQ(cluster.global_batch, 512);
  EXPECT_EQ(cluster.precision, Precision::kMixed);
  EXPECT_EQ(cluster.stage, std::nullopt);
}

TEST(ClusterFile, ConvertsBandwidthToBytesAndLatencyToSeconds) {
  const ClusterSpec cluster = ParseClusterYaml(kValidCluster, kFile);
  ASSERT_TRUE(cluster.intra_node.has_value());
  ASSERT_TRUE(cluster.inter_node.has_value());
  EXPECT_DOUBLE_EQ(cluster.intra_node->bandwidth_bytes_per_s, 2400 * kGbps);
  EXPECT_DOUBLE_EQ(cluster.intra_node->bandwidth_bytes_per_s, 300e9);
  EXPECT_DOUBLE_EQ(cluster.intra_node->latency_s, 5e-6);
  EXPECT_DOUBLE_EQ(cluster.inter_node->bandwidth_bytes_per_s, 12.5e9);
  EXPECT_DOUBLE_EQ(cluster.inter_node->latency_s, 20e-6);
}

TEST(ClusterFile, AcceptsFractionalBandwidthAndZeroLatency) {
  const ClusterSpec cluster = ParseClusterYaml(
      ValidWith("{bandwidth_gbps: 100, latency_us: 20}", "{bandwidth_gbps: 12.5, latency_us: 0}"), kFile);
  ASSERT_TRUE(cluster.inter_node.has_value());
  EXPECT_DOUBLE_EQ(cluster.inter_node->bandwidth_bytes_per_s, 12.5 * kGbps);
  EXPECT_EQ(cluster.inter_node->latency_s, 0);
}

TEST(ClusterFile, ParsesNodesAndDeviceGroupsInOrder) {
  const ClusterSpec cluster = ParseClusterYaml(kValidCluster, kFile);
  ASSERT_EQ(cluster.nodes.size(), 2u);
  const NodeSpec& a = cluster.nodes[0];
  EXPECT_EQ(a.name, "node-a");
  EXPECT_EQ(a.host, "10.0.0.1");
  ASSERT_EQ(a.devices.size(), 2u);
  EXPECT_EQ(a.devices[0].type, "A100-80GB");
  EXPECT_EQ(a.devices[0].count, 2);
  EXPECT_EQ(a.devices[1].type, "V100-16GB");
  EXPECT_EQ(a.devices[1].count, 1);
  const NodeSpec& b = cluster.nodes[1];
  EXPECT_EQ(b.name, "node-b");
  ASSERT_EQ(b.devices.size(), 2u);
  EXPECT_EQ(b.devices[0].type, "T4-16GB");
  EXPECT_EQ(b.devices[0].count, 3);
  EXPECT_EQ(b.devices[1].type, "A100-80GB");
  EXPECT_EQ(b.devices[1].count, 1);
}

TEST(ClusterFile, HostDefaultsToNodeName) {
  const ClusterSpec cluster = ParseClusterYaml(kValidCluster, kFile);
  ASSERT_EQ(cluster.nodes.size(), 2u);
  EXPECT_EQ(cluster.nodes[1].host, "node-b");
}

TEST(ClusterFile, ParsesFixedStages) {
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(stage);
    const ClusterSpec cluster = ParseClusterYaml(ValidWith("stage: auto", "stage: " + std::to_string(stage)), kFile);
    EXPECT_EQ(cluster.stage, stage);
  }
}

TEST(ClusterFile, StageDefaultsToAutomatic) {
  const ClusterSpec cluster = ParseClusterYaml(ValidWith("  stage: auto\n", ""), kFile);
  EXPECT_EQ(cluster.stage, std::nullopt);
}

TEST(ClusterFile, ParsesPrecision) {
  EXPECT_EQ(ParseClusterYaml(ValidWith("precision: mixed", "precision: fp32"), kFile).precision, Precision::kFp32);
  EXPECT_EQ(ParseClusterYaml(ValidWith("precision: mixed", "precision: bf16"), kFile).precision, Precision::kMixed);
  EXPECT_EQ(ParseClusterYaml(ValidWith("  precision: mixed\n", ""), kFile).precision, Precision::kMixed);
}

TEST(ClusterFile, ResolvesProfilesAgainstTheFilesFolder) {
  EXPECT_EQ(ParseClusterYaml(kValidCluster, "configs/lab/cluster.yaml").profiles_dir, "configs/lab/profiles/lab");
  EXPECT_EQ(ParseClusterYaml(kValidCluster, "/etc/poplar/cluster.yaml").profiles_dir, "/etc/poplar/profiles/lab");
  EXPECT_EQ(ParseClusterYaml(kValidCluster, "cluster.yaml").profiles_dir, "./profiles/lab");
}

TEST(ClusterFile, KeepsAbsoluteProfilesPath) {
  const ClusterSpec cluster = ParseClusterYaml(ValidWith("profiles: profiles/lab", "profiles: /srv/profiles"), kFile);
  EXPECT_EQ(cluster.profiles_dir, "/srv/profiles");
}

TEST(ClusterFile, ProfilesDirIsEmptyWhenNotGiven) {
  const ClusterSpec cluster = ParseClusterYaml(ValidWith("profiles: profiles/lab\n", ""), kFile);
  EXPECT_EQ(cluster.profiles_dir, "");
}

TEST(ClusterFile, SingleDeviceNeedsNoNetwork) {
  const ClusterSpec cluster = ParseClusterYaml(kSingleDeviceCluster, kFile);
  EXPECT_EQ(cluster.DeviceCount(), 1);
  EXPECT_FALSE(cluster.intra_node.has_value());
  EXPECT_FALSE(cluster.inter_node.has_value());
  EXPECT_EQ(cluster.SlowestLink(), std::nullopt);
}

TEST(ClusterSpec, CountsDevicesOverAllNodesAndGroups) {
  EXPECT_EQ(ParseClusterYaml(kValidCluster, kFile).DeviceCount(), 2 + 1 + 3 + 1);
}

// Ranks are ints and a plan lists each one: the count of devices is bounded, so that it
// cannot overflow and the planner's memory stays bounded.
TEST(ClusterSpec, RefusesMoreThanAMillionDevicesInAll) {
  std::string yaml =
      "training: {global_batch: 8}\nnetwork:\n  inter_node: {bandwidth_gbps: 100, latency_us: 15}\n"
      "  intra_node: {bandwidth_gbps: 100, latency_us: 15}\nnodes:\n";
  for (int i = 0; i < 3; ++i) {
    yaml += "  - {name: n" + std::to_string(i) + ", devices: [{type: A100-80GB, count: 400000}]}\n";
  }
  ExpectRejected(yaml, "nodes", "more than 1000000 devices (1200000 by nodes[2])");
  const std::string fits = yaml.substr(0, yaml.rfind("  - {name: n2"));
  EXPECT_EQ(ParseClusterYaml(fits, kFile).DeviceCount(), 800000);
}

TEST(ClusterSpec, ListsDeviceTypesInOrderOfFirstAppearance) {
  EXPECT_EQ(ParseClusterYaml(kValidCluster, kFile).DeviceTypes(),
            (std::vector<std::string>{"A100-80GB", "V100-16GB", "T4-16GB"}));
}

TEST(ClusterSpec, SlowestLinkIsInterNodeAcrossNodes) {
  const ClusterSpec cluster = ParseClusterYaml(kValidCluster, kFile);
  const auto link = cluster.SlowestLink();
  ASSERT_TRUE(link.has_value());
  EXPECT_DOUBLE_EQ(link->bandwidth_bytes_per_s, 100 * kGbps);
  EXPECT_DOUBLE_EQ(link->latency_s, 20e-6);
}

TEST(ClusterSpec, SlowestLinkIsIntraNodeWithinOneNode) {
  const ClusterSpec cluster = ParseClusterYaml(R"(training: {global_batch: 8}
network:
  intra_node: {bandwidth_gbps: 800, latency_us: 3}
nodes:
  - name: solo
    devices:
      - {type: A100-80GB, count: 4}
)",
                                               kFile);
  const auto link = cluster.SlowestLink();
  ASSERT_TRUE(link.has_value());
  EXPECT_DOUBLE_EQ(link->bandwidth_bytes_per_s, 800 * kGbps);
  EXPECT_DOUBLE_EQ(link->latency_s, 3e-6);
}

// ---------------------------------------------------------------------------
// Errors concerning the whole file.

// The keys of `poplar launch`: agent addresses and the job.
constexpr char kJob[] = "job: {model: gpt.json, data: tokens.bin, steps: 10}\n";

TEST(ClusterFile, RejectsAnAgentWithoutAPort) {
  ExpectRejected(ValidWith("    host: 10.0.0.1\n", "    host: 10.0.0.1\n    agent: 10.0.0.1\n"), "nodes[0].agent",
                 "must be host:port");
  // gRPC dialled 99999 as 34463, "host:" as 443 and -1 as 65535.
  for (const std::string port : {"99999", "-1", "0", "abc"}) {
    ExpectRejected(ValidWith("    host: 10.0.0.1\n", "    host: 10.0.0.1\n    agent: \"10.0.0.1:" + port + "\"\n"),
                   "nodes[0].agent", "port must be a number from 1 to 65535, got '" + port + "'");
  }
  ExpectRejected(ValidWith("    host: 10.0.0.1\n", "    host: 10.0.0.1\n    agent: \"10.0.0.1:\"\n"), "nodes[0].agent",
                 "must be host:port");
}

TEST(ClusterFile, ParsesTheJobAndRejectsItsBadValues) {
  const ClusterSpec cluster = ParseClusterYaml(std::string(kValidCluster) + kJob, kFile);
  ASSERT_TRUE(cluster.job.has_value());
  EXPECT_EQ(cluster.job->settings.steps, 10);
  EXPECT_FALSE(cluster.job->settings.lr.has_value());
  ExpectRejected(std::string(kValidCluster) + Replaced(kJob, "steps: 10", "steps: 0"), "job.steps",
                 "optimizer steps from 1 to 1099511627776, got 0 (line");
  ExpectRejected(std::string(kValidCluster) + Replaced(kJob, "steps: 10", "steps: 10, lr: -1"), "job.lr",
                 "must be a positive number, got -1 (line");
  // From about 1e37 the worker's fp32 update overflowed in libtorch, with an error that
  // named nothing.
  ExpectRejected(std::string(kValidCluster) + Replaced(kJob, "steps: 10", "steps: 10, lr: 1e38"), "job.lr",
                 "must be at most 1e6 (a larger rate only diverges), got 1e38 (line");
  ExpectRejected(std::string(kValidCluster) + Replaced(kJob, "steps: 10", "steps: 10, grad_clip: -1"), "job.grad_clip",
                 "zero or more");
  ExpectRejected(std::string(kValidCluster) + Replaced(kJob, "steps: 10", "steps: 10, checkpoint_every: -2"),
                 "job.checkpoint_every", "(0: only at the end) from 0 to 1099511627776, got -2");
  ExpectRejected(std::string(kValidCluster) + Replaced(kJob, "steps: 10", "steps: 10, epochs: 3"), "job.epochs",
                 "unknown key");
  EXPECT_EQ(ParseClusterYaml(std::string(kValidCluster) + Replaced(kJob, "steps: 10", "steps: 10, keep_checkpoints: 3"),
                             kFile)
                .job->settings.keep_checkpoints,
            3);
  ExpectRejected(std::string(kValidCluster) + Replaced(kJob, "steps: 10", "steps: 10, keep_checkpoints: -1"),
                 "job.keep_checkpoints", "a number of checkpoints (0: every one) from 0 to 1000000, got -1");
  // The learning-rate schedule: named decays, and settings that would change nothing or
  // leave no step to decay over are refused, naming the key that made it so.
  const auto with_job = [](const std::string& more) {
    return std::string(kValidCluster) + Replaced(kJob, "steps: 10", "steps: 10, " + more);
  };
  const JobSpec scheduled = *ParseClusterYaml(with_job("lr: 1e-3, warmup_steps: 2, lr_decay: cosine"), kFile).job;
  EXPECT_EQ(ScheduleOf(scheduled).decay, LrDecay::kCosine);
  EXPECT_EQ(ScheduleOf(scheduled).decay_steps, 10);  // the job's steps
  EXPECT_DOUBLE_EQ(ScheduleOf(scheduled).min_lr, 1e-4);
  ExpectRejected(with_job("lr_decay: step"), "job.lr_decay", "must be constant, cosine or linear, got 'step'");
  ExpectRejected(with_job("min_lr: 1e-5"), "job.min_lr", "is for a decay: add lr_decay: cosine or linear");
  ExpectRejected(with_job("lr_decay: constant, decay_steps: 5"), "job.decay_steps", "is for a decay");
  ExpectRejected(with_job("lr_decay: linear, warmup_steps: 10"), "job.steps",
                 "is 10, not more than the 10 warm-up steps: no step is left to decay over");
  ExpectRejected(with_job("lr_decay: linear, warmup_steps: 4, decay_steps: 4"), "job.decay_steps", "is 4");
  ExpectRejected(with_job("lr_decay: linear, min_lr: 1e-3"), "job.min_lr",
                 "must be from 0 to the peak learning rate (0.0006), got 0.001");
  JobSpec overridden = scheduled;
  overridden.settings.steps = 2;  // `poplar launch --steps 2`
  try {
    ScheduleOf(overridden, "cluster.yaml", "--steps");
    ADD_FAILURE() << "no error";
  } catch (const InputError& error) {
    EXPECT_TRUE(Contains(error.what(), "--steps: is 2, not more than the 2 warm-up steps")) << error.what();
  }
  // The stop grace: 30 s unless given, a whole number of seconds from 1 to an hour.
  EXPECT_EQ(StopGraceSeconds(ParseClusterYaml(std::string(kValidCluster) + kJob, kFile).job->settings), 30);
  EXPECT_EQ(
      ParseClusterYaml(std::string(kValidCluster) + Replaced(kJob, "steps: 10", "steps: 10, stop_grace_s: 120"), kFile)
          .job->settings.stop_grace_s,
      120);
  const auto with_grace = [](const std::string& grace) {
    return std::string(kValidCluster) + Replaced(kJob, "steps: 10", "steps: 10, stop_grace_s: " + grace);
  };
  ExpectRejected(with_grace("0"), "job.stop_grace_s",
                 "must be a number of seconds a stopped rank may take to end from 1 to 3600, got 0");
  ExpectRejected(with_grace("3601"), "job.stop_grace_s", "from 1 to 3600, got 3601");
  ExpectRejected(with_grace("30s"), "job.stop_grace_s", "30s");
  // The held-out evaluation: its counts need its file.
  const JobSpec evaluated =
      *ParseClusterYaml(with_job("eval_data: valid.bin, eval_every: 100, eval_samples: 64"), kFile).job;
  EXPECT_EQ(evaluated.settings.eval_data, "valid.bin");  // relative to each agent's work directory
  EXPECT_EQ(evaluated.settings.eval_every, 100);
  EXPECT_EQ(evaluated.settings.eval_samples, 64);
  EXPECT_FALSE(ParseClusterYaml(std::string(kValidCluster) + kJob, kFile).job->settings.eval_data.has_value());
  ExpectRejected(with_job("eval_every: 100"), "job.eval_every", "is for an evaluation: add eval_data");
  ExpectRejected(with_job("eval_samples: 64"), "job.eval_samples", "is for an evaluation: add eval_data");
  ExpectRejected(with_job("eval_data: valid.bin, eval_every: -1"), "job.eval_every", "got -1");
  // The adaptive batch: bounds in order around training.global_batch (512), chosen by
  // the head with batch: adaptive.
  const JobSpec adaptive =
      *ParseClusterYaml(with_job("batch: adaptive, batch_min: 128, batch_max: 2048, batch_every: 30"), kFile).job;
  EXPECT_EQ(adaptive.settings.batch, "adaptive");
  EXPECT_EQ(adaptive.settings.batch_min, 128);
  EXPECT_EQ(adaptive.settings.batch_max, 2048);
  EXPECT_EQ(adaptive.settings.batch_every, 30);
  ExpectRejected(with_job("batch: adaptive"), "job.batch",
                 "is chosen within the bounds batch_min and batch_max: add batch_max");
  ExpectRejected(with_job("batch: sometimes, batch_min: 1, batch_max: 1024"), "job.batch",
                 "must be fixed or adaptive, got 'sometimes'");
  ExpectRejected(with_job("batch_min: 128"), "job.batch_min", "with batch_max: add batch_max");
  ExpectRejected(with_job("batch_min: 1024, batch_max: 256"), "job.batch_max", "is 256, below batch_min 1024");
  ExpectRejected(with_job("batch_min: 1024, batch_max: 4096"), "job.batch_min",
                 "the bounds 1024 to 4096 must hold the batch the job starts with, training.global_batch 512");
  ExpectRejected(with_job("batch_every: 10"), "job.batch_every", "is how often an adaptive batch is chosen: add batch");
  // Token files are in each agent's work_dir, which every agent refuses to leave: refused
  // here, before any profiling, rather than by the agents at the launch.
  ExpectRejected(std::string(kValidCluster) + Replaced(kJob, "data: tokens.bin", "data: /etc/passwd"), "job.data",
                 "must be relative to each agent's work_dir (where the agent looks for it), got '/etc/passwd'");
  ExpectRejected(std::string(kValidCluster) + Replaced(kJob, "data: tokens.bin", "data: ../tokens.bin"), "job.data",
                 "must name a file inside each agent's work_dir, got '../tokens.bin'");
  ExpectRejected(with_job("eval_data: sub/../../valid.bin"), "job.eval_data", "must name a file inside");
  EXPECT_EQ(ParseClusterYaml(with_job("eval_data: sub/../valid.bin"), kFile).job->settings.eval_data,
            "sub/../valid.bin");
}

TEST(ClusterFile, RejectsMalformedYaml) {
  const InputError error = ParseError("training:\n  global_batch: [1, 2\nnodes: []\n");
  EXPECT_EQ(error.file(), kFile);
  EXPECT_EQ(error.key(), "");
  EXPECT_TRUE(StartsWith(error.reason(), "not valid YAML"));
  EXPECT_TRUE(Contains(error.reason(), "line"));
  // Nesting beyond yaml-cpp's depth guard is named (its own words are "bad file").
  const InputError deep = ParseError("name: " + std::string(3000, '[') + std::string(3000, ']') + "\n");
  EXPECT_EQ(deep.reason(), "not valid YAML: nested too deeply (line 1)");
}

TEST(ClusterFile, RejectsEmptyFile) {
  for (const std::string text : {"", "\n", "# only a comment\n"}) {
    SCOPED_TRACE(text);
    const InputError error = ParseError(text);
    EXPECT_EQ(error.file(), kFile);
    EXPECT_EQ(error.key(), "");
    EXPECT_EQ(error.reason(), "is empty");
  }
}

// yaml-cpp's Load reads the first document only: a second cluster pasted after `---`
// is refused rather than ignored.
TEST(ClusterFile, RejectsASecondDocumentButNotMarkersAroundOne) {
  const InputError error = ParseError(std::string(kValidCluster) + "---\n" + kSingleDeviceCluster);
  EXPECT_EQ(error.file(), kFile);
  EXPECT_EQ(error.key(), "");
  EXPECT_TRUE(ContainsAll(error.reason(), {"holds 2 YAML documents", "must hold one", "begins on line 21"}))
      << error.reason();
  EXPECT_EQ(ParseClusterYaml(std::string("---\n") + kValidCluster + "---\n", kFile).global_batch, 512);
}

// yaml-cpp does not expand `<<: *anchor`; the key is named for what it is.
TEST(ClusterFile, RejectsMergeKeysByName) {
  const std::string text = ValidWith("nodes:\n  - name: node-a\n", "nodes:\n  - name: node-a\n    <<: {x: 1}\n");
  const InputError error = ParseError(text);
  EXPECT_EQ(error.key(), "nodes[0].<<");
  EXPECT_TRUE(Contains(error.reason(), "YAML merge keys are not supported")) << error.reason();
  // Also where the merge would have given required keys (not "... is required").
  const InputError merged = ParseError(ValidWith("  intra_node: {bandwidth_gbps: 2400, latency_us: 5}\n",
                                                 "  intra_node: {<<: {bandwidth_gbps: 2400, latency_us: 5}}\n"));
  EXPECT_EQ(merged.key(), "network.intra_node.<<");
  EXPECT_TRUE(Contains(merged.reason(), "YAML merge keys are not supported")) << merged.reason();
}

// YAML allows a collection as a key (`[x]: 1`, `? {a: 1}`); yaml-cpp's conversion of
// one to a name threw its own "bad conversion", an internal error.
TEST(ClusterFile, RejectsAKeyThatIsACollectionByWhereItIs) {
  const InputError top = ParseError(std::string(kValidCluster) + "[x]: 1\n");
  EXPECT_EQ(top.key(), "");
  EXPECT_TRUE(ContainsAll(top.reason(), {"has a key that is a collection", "line 20", "plain name"})) << top.reason();
  const InputError nested = ParseError(ValidWith("  intra_node: {bandwidth_gbps: 2400, latency_us: 5}\n",
                                                 "  intra_node: {bandwidth_gbps: 2400, latency_us: 5, ? {a: 1}: 2}\n"));
  EXPECT_EQ(nested.key(), "network.intra_node");
  EXPECT_TRUE(Contains(nested.reason(), "has a key that is a collection")) << nested.reason();
}

// A key given no value is said to be so, once, with its line, even for an optional key.
TEST(ClusterFile, AKeyGivenNoValueIsNamedAsSuch) {
  for (const std::string value : {"~", "", "null"}) {
    const InputError error = ParseError(ValidWith("  stage: auto\n", "  stage: " + value + "\n"));
    EXPECT_EQ(error.key(), "training.stage");
    EXPECT_EQ(error.reason(), "has no value (give one, or leave the key out where it is optional) (line 6)") << value;
  }
}

// A stage is a plain number, as global_batch is: '3' is refused as "512" is.
TEST(ClusterFile, AQuotedStageNumberIsRefusedAsAString) {
  const InputError error = ParseError(ValidWith("  stage: auto\n", "  stage: '3'\n"));
  EXPECT_EQ(error.key(), "training.stage");
  EXPECT_EQ(error.reason(),
            "must be auto, 0, 1, 2 or 3, got the string \"3\"; write it without quotes: stage: 3 (line 6)");
  EXPECT_EQ(ParseClusterYaml(ValidWith("  stage: auto\n", "  stage: 'auto'\n"), kFile).stage, std::nullopt);
  // Tagged with its type, a number is one (`!!int 3` is not "a string").
  EXPECT_EQ(ParseClusterYaml(ValidWith("  stage: auto\n", "  stage: !!int 3\n"), kFile).stage, 3);
  EXPECT_EQ(ParseClusterYaml(ValidWith("  global_batch: 512\n", "  global_batch: !!int 512\n"), kFile).global_batch,
            512);
}

TEST(ClusterFile, RejectsTopLevelThatIsNotAMapping) {
  for (const std::string text : {"- a\n- b\n", "just a string\n", "42\n"}) {
    SCOPED_TRACE(text);
    const InputError error = ParseError(text);
    EXPECT_EQ(error.file(), kFile);
    EXPECT_EQ(error.key(), "");
    EXPECT_TRUE(Contains(error.reason(), "must be a mapping"));
  }
}

TEST(ClusterFile, ErrorMessageNamesFileKeyAndReason) {
  const InputError error = ParseError(ValidWith("count: 3", "count: -2"));
  EXPECT_STREQ(error.what(),
               "configs/lab/cluster.yaml: nodes[1].devices[0].count: "
               "must be a number of devices from 1 to 1000000, got -2 (line 18)");
}

// ---------------------------------------------------------------------------
// Unknown keys.

TEST(ClusterFile, RejectsUnknownTopLevelKeyAndListsKnownKeys) {
  const InputError error = ParseError(std::string(kValidCluster) + "colour: red\n");
  EXPECT_EQ(error.file(), kFile);
  EXPECT_EQ(error.key(), "colour");
  EXPECT_TRUE(ContainsAll(error.reason(), {"unknown key", "name", "profiles", "training", "network", "nodes"}));
}

// Keys the parser only looks for when present (credentials, job, checkpoint_every) are
// known too, and a near miss is named: `credentails:` is matched to `credentials`.
TEST(ClusterFile, AMisspeltKeyIsMatchedToTheOneMeant) {
  const InputError top = ParseError(std::string(kValidCluster) + "credentails: {}\n");
  EXPECT_EQ(top.key(), "credentails");
  EXPECT_TRUE(ContainsAll(top.reason(), {"did you mean credentials?", "known keys here:", "credentials", "job"}))
      << top.reason();
  const InputError nested =
      ParseError(std::string(kValidCluster) + Replaced(kJob, "steps: 10", "steps: 10, checkpoint_evry: 2"));
  EXPECT_EQ(nested.key(), "job.checkpoint_evry");
  EXPECT_TRUE(Contains(nested.reason(), "did you mean checkpoint_every?")) << nested.reason();
  const InputError far = ParseError(std::string(kValidCluster) + "colour: red\n");
  EXPECT_FALSE(Contains(far.reason(), "did you mean")) << far.reason();
}

TEST(ClusterFile, RejectsUnknownTrainingKeyAndListsKnownKeys) {
  const InputError error = ParseError(ValidWith("  stage: auto\n", "  stage: auto\n  epochs: 3\n"));
  EXPECT_EQ(error.file(), kFile);
  EXPECT_EQ(error.key(), "training.epochs");
  EXPECT_TRUE(ContainsAll(error.reason(), {"unknown key", "global_batch", "precision", "stage"}));
}

TEST(ClusterFile, RejectsUnknownDeviceGroupKey) {
  const InputError error = ParseError(ValidWith("{type: T4-16GB, count: 3}", "{type: T4-16GB, count: 3, colour: red}"));
  EXPECT_EQ(error.key(), "nodes[1].devices[0].colour");
  EXPECT_TRUE(ContainsAll(error.reason(), {"unknown key", "type", "count"}));
}

TEST(ClusterFile, RejectsUnknownNodeKey) {
  const InputError error = ParseError(ValidWith("    host: 10.0.0.1\n", "    host: 10.0.0.1\n    rack: 7\n"));
  EXPECT_EQ(error.key(), "nodes[0].rack");
  EXPECT_TRUE(ContainsAll(error.reason(), {"unknown key", "host", "devices"}));
}

TEST(ClusterFile, RejectsUnknownNetworkKeys) {
  ExpectRejected(ValidWith("network:\n", "network:\n  wan: {bandwidth_gbps: 1, latency_us: 1}\n"), "network.wan",
                 "unknown key");
  ExpectRejected(ValidWith("latency_us: 5}", "latency_us: 5, jitter_us: 1}"), "network.intra_node.jitter_us",
                 "unknown key");
}

TEST(ClusterFile, RejectsDuplicateKey) {
  // YAML forbids repeated keys in a mapping; taking either value silently would train
  // with a global batch the user may not have meant.
  const InputError error = ParseError(ValidWith("  global_batch: 512\n", "  global_batch: 512\n  global_batch: 64\n"));
  EXPECT_EQ(error.file(), kFile);
  EXPECT_TRUE(Contains(error.what(), "global_batch"));
}

TEST(ClusterFile, RejectsMisspeltKeyInsteadOfUsingDefault) {
  // "precison" must not silently leave the default precision in place.
  ExpectRejected(ValidWith("precision: mixed", "precison: fp32"), "training.precison", "unknown key");
}

// ---------------------------------------------------------------------------
// The training section.

TEST(ClusterFile, RejectsMissingTraining) {
  ExpectRejected(ValidWith("training:\n  global_batch: 512\n  precision: mixed\n  stage: auto\n", ""), "training",
                 "is required");
}

TEST(ClusterFile, RejectsTrainingThatIsNotAMapping) {
  ExpectRejected(ValidWith("training:\n  global_batch: 512\n  precision: mixed\n  stage: auto\n", "training: 512\n"),
                 "training", "must be a mapping");
}

TEST(ClusterFile, RejectsMissingGlobalBatch) {
  ExpectRejected(ValidWith("  global_batch: 512\n", ""), "training.global_batch", "is required");
}

TEST(ClusterFile, RejectsZeroGlobalBatch) {
  ExpectRejected(ValidWith("global_batch: 512", "global_batch: 0"), "training.global_batch",
                 "must be a number of samples from 1 to 1000000, got 0");
}

TEST(ClusterFile, RejectsNegativeGlobalBatch) {
  ExpectRejected(ValidWith("global_batch: 512", "global_batch: -16"), "training.global_batch",
                 "from 1 to 1000000, got -16");
}

// A plan lists every micro-batch, so the global batch is bounded far below what would
// overflow the search or run it out of memory.
TEST(ClusterFile, RejectsGlobalBatchBeyondAnyPlan) {
  EXPECT_EQ(ParseClusterYaml(ValidWith("global_batch: 512", "global_batch: 1000000"), kFile).global_batch, 1000000);
  ExpectRejected(ValidWith("global_batch: 512", "global_batch: 1000001"), "training.global_batch",
                 "from 1 to 1000000, got 1000001");
  ExpectRejected(ValidWith("global_batch: 512", "global_batch: 9223372036854775807"), "training.global_batch",
                 "from 1 to 1000000");
}

TEST(ClusterFile, RejectsGlobalBatchThatIsNotAnInteger) {
  ExpectRejected(ValidWith("global_batch: 512", "global_batch: 1.5"), "training.global_batch",
                 "must be an integer, got '1.5'");
  ExpectRejected(ValidWith("global_batch: 512", "global_batch: lots"), "training.global_batch",
                 "must be an integer, got 'lots'");
  ExpectRejected(ValidWith("global_batch: 512", "global_batch: [512]"), "training.global_batch", "must be an integer");
}

TEST(ClusterFile, RejectsUnknownPrecision) {
  ExpectRejected(ValidWith("precision: mixed", "precision: fp8"), "training.precision",
                 "must be fp32, mixed, bf16 or fp16, got 'fp8'");
}

TEST(ClusterFile, RejectsStageOutOfRange) {
  ExpectRejected(ValidWith("stage: auto", "stage: 4"), "training.stage", "must be auto, 0, 1, 2 or 3, got '4'");
  ExpectRejected(ValidWith("stage: auto", "stage: -1"), "training.stage", "got '-1'");
}

TEST(ClusterFile, RejectsStageThatIsNotANumber) {
  ExpectRejected(ValidWith("stage: auto", "stage: two"), "training.stage", "must be auto, 0, 1, 2 or 3, got 'two'");
}

// ---------------------------------------------------------------------------
// Nodes and devices.

// The valid cluster up to (not including) its nodes section.
std::string WithoutNodes() {
  const std::string text = kValidCluster;
  return text.substr(0, text.find("nodes:\n"));
}

TEST(ClusterFile, RejectsMissingNodes) {
  ExpectRejected(WithoutNodes(), "nodes", "is required");
  // A misspelt section is named where its absence is, as a misspelt network is before
  // what its absence means.
  const std::string text = kValidCluster;
  ExpectRejected(Replaced(text, "nodes:\n", "nodess:\n"), "nodes", "found 'nodess'");
  ExpectRejected(Replaced(text, "network:", "netwrok:"), "netwrok", "unknown key");
}

TEST(ClusterFile, RejectsEmptyNodeList) {
  ExpectRejected(WithoutNodes() + "nodes: []\n", "nodes", "must be a non-empty list of nodes");
}

TEST(ClusterFile, RejectsNodesThatAreNotAList) {
  ExpectRejected(WithoutNodes() + "nodes: node-a\n", "nodes", "must be a non-empty list");
  ExpectRejected(WithoutNodes() + "nodes:\n  node-a: {devices: []}\n", "nodes", "must be a non-empty list");
}

TEST(ClusterFile, RejectsNodeThatIsNotAMapping) {
  ExpectRejected(WithoutNodes() + "nodes:\n  - node-a\n", "nodes[0]", "must be a mapping");
}

TEST(ClusterFile, RejectsNodeWithoutName) {
  ExpectRejected(ValidWith("  - name: node-b\n", "  -\n"), "nodes[1].name", "is required");
}

TEST(ClusterFile, RejectsEmptyDeviceList) {
  ExpectRejected(
      Replaced(kSingleDeviceCluster, "    devices:\n      - {type: T4-16GB, count: 1}\n", "    devices: []\n"),
      "nodes[0].devices", "must be a non-empty list of {type, count}");
}

TEST(ClusterFile, RejectsMissingDeviceList) {
  ExpectRejected(
      Replaced(kSingleDeviceCluster, "    devices:\n      - {type: T4-16GB, count: 1}\n", "    host: solo.lab\n"),
      "nodes[0].devices", "is required");
}

TEST(ClusterFile, RejectsDeviceGroupThatIsNotAMapping) {
  ExpectRejected(Replaced(kSingleDeviceCluster, "{type: T4-16GB, count: 1}", "T4-16GB"), "nodes[0].devices[0]",
                 "must be a mapping");
}

TEST(ClusterFile, RejectsZeroDeviceCount) {
  ExpectRejected(ValidWith("count: 2", "count: 0"), "nodes[0].devices[0].count",
                 "must be a number of devices from 1 to 1000000, got 0");
}

TEST(ClusterFile, RejectsNegativeDeviceCount) {
  ExpectRejected(ValidWith("count: 2", "count: -2"), "nodes[0].devices[0].count",
                 "must be a number of devices from 1 to 1000000, got -2");
}

TEST(ClusterFile, RejectsDeviceCountThatIsNotAnInteger) {
  ExpectRejected(ValidWith("count: 1}", "count: 1.5}"), "nodes[0].devices[1].count", "must be an integer, got '1.5'");
  ExpectRejected(ValidWith("count: 1}", "count: four}"), "nodes[0].devices[1].count", "must be an integer, got 'four'");
}

TEST(ClusterFile, RejectsMissingDeviceCount) {
  ExpectRejected(ValidWith("{type: V100-16GB, count: 1}", "{type: V100-16GB}"), "nodes[0].devices[1].count",
                 "is required");
}

TEST(ClusterFile, RejectsMissingDeviceType) {
  ExpectRejected(ValidWith("{type: V100-16GB, count: 1}", "{count: 1}"), "nodes[0].devices[1].type", "is required");
}

TEST(ClusterFile, RejectsDeviceTypeThatIsNotAPlainName) {
  // The type names the profile file <type>.json, so it must not leave the folder.
  // Nor hold what would break a message or a table: spaces, a newline, a terminal escape
  // (YAML's "\n" and "\e" in double quotes).
  for (const std::string type :
       {"gpus/T4-16GB", "../../etc/passwd", "..", ".", "T4 16GB", " T4-16GB", "T4-16GB\\n", "\\e[31mT4"}) {
    SCOPED_TRACE(type);
    ExpectRejected(ValidWith("type: T4-16GB", "type: \"" + type + "\""), "nodes[1].devices[0].type",
                   "must be a plain name");
  }
}

// Every message is one line a terminal prints as text, however long or strange the
// value it quotes.
TEST(ClusterFile, AQuotedValueIsEscapedAndClipped) {
  const InputError escaped = ParseError(ValidWith("type: T4-16GB", "type: \"T4\\n\\e[2J\""));
  EXPECT_EQ(std::string(escaped.what()).find_first_of("\n\x1b"), std::string::npos) << escaped.what();
  EXPECT_TRUE(Contains(escaped.what(), "'T4\\n\\x1b[2J'")) << escaped.what();
  const InputError clipped = ParseError(ValidWith("global_batch: 512", "global_batch: " + std::string(100000, 'x')));
  EXPECT_LT(std::string(clipped.what()).size(), 300u) << clipped.what();
  EXPECT_TRUE(Contains(clipped.what(), "... (100000 characters)")) << clipped.what();
}

TEST(ClusterFile, RejectsDuplicateNodeName) {
  ExpectRejected(ValidWith("name: node-b", "name: node-a"), "nodes[1].name", "'node-a' is used twice");
}

// Each node has its own agent: two nodes on one would both look "up" to `poplar status`,
// and a launch would ask the one agent twice.
TEST(ClusterFile, RejectsTwoNodesWithOneAgent) {
  ExpectRejected(ValidWith("  - name: node-b\n", "  - name: node-b\n    host: 10.0.0.1\n"), "nodes[1].agent",
                 "'10.0.0.1:7150' is also the agent of node 'node-a'");
}

// ---------------------------------------------------------------------------
// The network section.

TEST(ClusterFile, RequiresInterNodeLinkWithTwoNodes) {
  ExpectRejected(ValidWith("  inter_node: {bandwidth_gbps: 100, latency_us: 20}\n", ""), "network.inter_node",
                 "is required when the cluster has more than one node");
}

TEST(ClusterFile, RequiresNetworkSectionWithTwoNodes) {
  const std::string text = ValidWith(
      "network:\n  intra_node: {bandwidth_gbps: 2400, latency_us: 5}\n"
      "  inter_node: {bandwidth_gbps: 100, latency_us: 20}\n",
      "");
  const InputError error = ParseError(text);
  EXPECT_EQ(error.file(), kFile);
  EXPECT_TRUE(StartsWith(error.key(), "network."));
  EXPECT_TRUE(Contains(error.reason(), "is required"));
}

TEST(ClusterFile, RequiresIntraNodeLinkWithTwoDevicesOnANode) {
  const std::string text = Replaced(kSingleDeviceCluster, "count: 1", "count: 2") +
                           "network:\n  inter_node: {bandwidth_gbps: 100, latency_us: 20}\n";
  ExpectRejected(text, "network.intra_node", "is required when a node has more than one device");
}

TEST(ClusterFile, RequiresIntraNodeLinkWithTwoGroupsOnANode) {
  const std::string text = Replaced(kSingleDeviceCluster, "      - {type: T4-16GB, count: 1}\n",
                                    "      - {type: T4-16GB, count: 1}\n      - {type: V100-16GB, count: 1}\n");
  ExpectRejected(text, "network.intra_node", "is required when a node has more than one device");
}

TEST(ClusterFile, RejectsNegativeBandwidth) {
  ExpectRejected(ValidWith("bandwidth_gbps: 100", "bandwidth_gbps: -100"), "network.inter_node.bandwidth_gbps",
                 "from 0.001 to 1000000, got -100");
}

// 1e308 Gb/s is finite, but infinite in bytes per second: transfers would take no time.
TEST(ClusterFile, RejectsLinksBeyondAnyNetwork) {
  ExpectRejected(ValidWith("bandwidth_gbps: 100", "bandwidth_gbps: 1e308"), "network.inter_node.bandwidth_gbps",
                 "gigabits per second from 0.001 to 1000000, got 1e308 (line");
  ExpectRejected(ValidWith("bandwidth_gbps: 100", "bandwidth_gbps: 1e-9"), "network.inter_node.bandwidth_gbps",
                 "from 0.001 to 1000000");
  ExpectRejected(ValidWith("latency_us: 20", "latency_us: 1e12"), "network.inter_node.latency_us",
                 "microseconds from 0 to 10000000, got 1e12");
  const ClusterSpec fastest = ParseClusterYaml(ValidWith("bandwidth_gbps: 2400", "bandwidth_gbps: 1000000"), kFile);
  EXPECT_DOUBLE_EQ(fastest.intra_node->bandwidth_bytes_per_s, 1e6 * kGbps);
}

// YAML's .inf and .nan are numbers to yaml-cpp; every number of a cluster file must be
// finite, the job's learning rate among them.
TEST(ClusterFile, RejectsInfiniteOrNanNumbersAnywhere) {
  ExpectRejected(ValidWith("bandwidth_gbps: 2400", "bandwidth_gbps: .inf"), "network.intra_node.bandwidth_gbps",
                 "must be a finite number, got '.inf'");
  ExpectRejected(ValidWith("latency_us: 5", "latency_us: .inf"), "network.intra_node.latency_us",
                 "must be a finite number");
  ExpectRejected(std::string(kValidCluster) + Replaced(kJob, "steps: 10", "steps: 10, lr: .nan"), "job.lr",
                 "must be a finite number, got '.nan'");
}

TEST(ClusterFile, RejectsZeroBandwidth) {
  ExpectRejected(ValidWith("bandwidth_gbps: 2400", "bandwidth_gbps: 0"), "network.intra_node.bandwidth_gbps",
                 "from 0.001 to 1000000, got 0");
}

TEST(ClusterFile, RejectsBandwidthThatIsNotANumber) {
  ExpectRejected(ValidWith("bandwidth_gbps: 2400", "bandwidth_gbps: fast"), "network.intra_node.bandwidth_gbps",
                 "must be a number, got 'fast'");
}

TEST(ClusterFile, RejectsNegativeLatency) {
  ExpectRejected(ValidWith("latency_us: 5", "latency_us: -5"), "network.intra_node.latency_us",
                 "microseconds from 0 to 10000000, got -5");
  ExpectRejected(ValidWith("latency_us: 20", "latency_us: -0.5"), "network.inter_node.latency_us",
                 "microseconds from 0 to 10000000, got -0.5");
}

TEST(ClusterFile, RejectsMissingLatency) {
  ExpectRejected(ValidWith("{bandwidth_gbps: 100, latency_us: 20}", "{bandwidth_gbps: 100}"),
                 "network.inter_node.latency_us", "is required");
}

// ---------------------------------------------------------------------------
// Reading files.

// A fresh folder under the test temporary directory, removed afterwards.
class ClusterFileOnDisk : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) { return scratch_.Write(name, text); }

  testing::ScratchDir scratch_{"poplar_cluster_test"};
  const std::string dir_ = scratch_.path();
};

TEST_F(ClusterFileOnDisk, LoadsFileAndResolvesProfilesNextToIt) {
  const std::string path = Write("lab.yaml", kValidCluster);
  const ClusterSpec cluster = LoadClusterFile(path);
  EXPECT_EQ(cluster.file, path);
  EXPECT_EQ(cluster.profiles_dir, dir_ + "/profiles/lab");
  EXPECT_EQ(cluster.DeviceCount(), 7);
}

TEST_F(ClusterFileOnDisk, ErrorsNameTheLoadedPath) {
  const std::string path = Write("lab.yaml", ValidWith("count: 2", "count: -2"));
  try {
    LoadClusterFile(path);
    FAIL() << "loaded without error";
  } catch (const InputError& error) {
    EXPECT_EQ(error.file(), path);
    EXPECT_EQ(error.key(), "nodes[0].devices[0].count");
    EXPECT_TRUE(StartsWith(error.what(), path + ": nodes[0].devices[0].count: "));
  }
}

TEST_F(ClusterFileOnDisk, RejectsMissingFile) {
  const std::string path = dir_ + "/no-such-cluster.yaml";
  try {
    LoadClusterFile(path);
    FAIL() << "loaded without error";
  } catch (const InputError& error) {
    EXPECT_EQ(error.file(), path);
    EXPECT_EQ(error.key(), "");
    EXPECT_TRUE(ContainsAll(error.reason(), {"cannot read", "No such file"}));
  }
}

TEST_F(ClusterFileOnDisk, RejectsFolderInsteadOfFile) {
  // A folder is not an empty cluster file: the reason must say it cannot be read.
  try {
    LoadClusterFile(dir_);
    FAIL() << "loaded without error";
  } catch (const InputError& error) {
    EXPECT_EQ(error.file(), dir_);
    EXPECT_EQ(error.key(), "");
    EXPECT_TRUE(Contains(error.reason(), "cannot read"));
  }
}

TEST(ClusterFileExamples, EveryShippedExampleParses) {
  for (const std::string name : {"a100-80-and-40", "a800-and-v100s", "v100-and-t4"}) {
    SCOPED_TRACE(name);
    const std::string path = std::string(POPLAR_SOURCE_DIR) + "/configs/" + name + ".yaml";
    const ClusterSpec cluster = LoadClusterFile(path);
    EXPECT_EQ(cluster.name, name);
    EXPECT_EQ(cluster.DeviceCount(), 8);
    EXPECT_EQ(cluster.DeviceTypes().size(), 2u);
    EXPECT_EQ(cluster.profiles_dir, std::string(POPLAR_SOURCE_DIR) + "/configs/profiles/gpt2-medium");
    EXPECT_TRUE(cluster.SlowestLink().has_value());
  }
}

// ---------------------------------------------------------------------------
// Under Slurm: the slurm section, and the allocation's nodes in place of `nodes`.

constexpr char kSlurmCluster[] = R"(name: hpc
training: {global_batch: 64, precision: fp32}
network:
  intra_node: {bandwidth_gbps: 20, latency_us: 30}
slurm:
  gpus: none
  emulated:
    - {type: emu-fast, count: 1, slowdown: 1.0, memory_mib: 48}
    - {type: emu-slow, count: 2, slowdown: 2.5, memory_mib: 20, threads: 2}
)";

InputError SlurmReadError(const std::string& text) {
  try {
    ParseClusterYaml(text, kFile, ClusterRead::kSlurmAllocation);
    ADD_FAILURE() << "parsed without error:\n" << text;
  } catch (const InputError& error) {
    return error;
  }
  return InputError("<none>", "<none>", "<no error was thrown>");
}

TEST(ClusterFile, ASlurmClusterTakesItsNodesFromTheAllocation) {
  const ClusterSpec read = ParseClusterYaml(kSlurmCluster, kFile, ClusterRead::kSlurmAllocation);
  ASSERT_TRUE(read.slurm.has_value());
  EXPECT_FALSE(read.slurm->discover_gpus);
  ASSERT_EQ(read.slurm->emulated.size(), 2u);
  EXPECT_EQ(read.slurm->emulated[1].count, 2);
  EXPECT_EQ(read.slurm->emulated[1].threads, 2);
  EXPECT_EQ(read.slurm->emulated[1].memory_bytes, std::int64_t{20} << 20);
  EXPECT_TRUE(read.nodes.empty());

  const ClusterSpec placed = OnNodes(read, {{"n1", "10.0.0.1", "", {{"emu-fast", 1}, {"emu-slow", 2}}}});
  EXPECT_EQ(placed.DeviceCount(), 3);
  EXPECT_EQ(placed.Ranks()[2].device_type, "emu-slow");
  // Two nodes need the link between nodes, which this file does not declare.
  try {
    OnNodes(read, {{"n1", "10.0.0.1", "", {{"emu-fast", 1}}}, {"n2", "10.0.0.2", "", {{"emu-fast", 1}}}});
    ADD_FAILURE() << "two nodes without network.inter_node were accepted";
  } catch (const InputError& error) {
    EXPECT_EQ(error.key(), "network.inter_node");
  }
}

TEST(ClusterFile, RefusesASlurmSectionThatOffersNothingAndNodesMissingOutsideSlurm) {
  const InputError nothing = SlurmReadError(Replaced(kSlurmCluster, R"(  emulated:
    - {type: emu-fast, count: 1, slowdown: 1.0, memory_mib: 48}
    - {type: emu-slow, count: 2, slowdown: 2.5, memory_mib: 20, threads: 2}
)",
                                                     ""));
  EXPECT_EQ(nothing.key(), "slurm.gpus");
  EXPECT_TRUE(Contains(nothing.reason(), "would offer no device"));
  const InputError twice = SlurmReadError(Replaced(kSlurmCluster, "type: emu-slow", "type: emu-fast"));
  EXPECT_EQ(twice.key(), "slurm.emulated[1].type");
  const InputError slowdown = SlurmReadError(Replaced(kSlurmCluster, "slowdown: 2.5", "slowdown: 0.5"));
  EXPECT_EQ(slowdown.key(), "slurm.emulated[1].slowdown");
  EXPECT_EQ(SlurmReadError(Replaced(kSlurmCluster, "gpus: none", "gpus: some")).key(), "slurm.gpus");
  // Under Slurm the section is required; elsewhere, nodes are.
  const std::string no_slurm = kSlurmCluster;
  EXPECT_EQ(SlurmReadError(no_slurm.substr(0, no_slurm.find("slurm:"))).key(), "slurm");
  const InputError no_nodes = ParseError(kSlurmCluster);
  EXPECT_EQ(no_nodes.key(), "nodes");
}

}  // namespace
}  // namespace poplar
