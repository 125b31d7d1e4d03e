// Token files of either width (planner/formats/token_file.h) read by the worker: a
// uint32 file trains exactly as the uint16 file of the same ids, a Llama of 70,000
// tokens trains and evaluates on ids past 65,535, and a bad uint32 file is refused
// naming the file and the byte. Real processes on loopback.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>

#include "planner/formats/token_file.h"
#include "worker_harness.h"

namespace poplar::testing {
namespace {

// The uint32 token file (with its header) of the ids of the uint16 file `narrow`.
std::string WidenedTokens(const ScratchDir& scratch, const std::string& narrow, const std::string& name) {
  const std::string bytes = ReadWholeFile(narrow);
  std::string wide = TokenFileHeader(32);
  for (std::size_t i = 0; i + 1 < bytes.size(); i += 2) {
    AppendToken(wide, static_cast<unsigned char>(bytes[i]) | static_cast<unsigned char>(bytes[i + 1]) << 8, 32);
  }
  return scratch.Write(name, wide);
}

// A Llama as WriteLlamaConfig's, of `vocab_size` tokens.
std::string WriteLlamaOfVocabulary(const ScratchDir& scratch, int vocab_size) {
  return scratch.Write("model.json", nlohmann::json{{"arch", "llama"},
                                                    {"n_layer", 2},
                                                    {"n_head", 4},
                                                    {"n_kv_head", 2},
                                                    {"n_embd", 32},
                                                    {"vocab_size", vocab_size},
                                                    {"block_size", 16}}
                                         .dump());
}

// `count` uint32 tokens of a learnable sequence over ids near the top of a vocabulary
// of 70,000: a repeated cycle of 37 ids from 65,000 up, most of them past 65,535.
std::string WriteWideTokens(const ScratchDir& scratch, int count, const std::string& name) {
  std::vector<std::uint32_t> ids;
  for (int i = 0; i < count; ++i) ids.push_back(65000 + static_cast<std::uint32_t>(i % 37) * 131);
  std::string bytes = TokenFileHeader(32);
  for (std::uint32_t id : ids) AppendToken(bytes, id, 32);
  return scratch.Write(name, bytes);
}

std::vector<nlohmann::json> Records(const ScratchDir& scratch, const std::string& name) {
  std::vector<nlohmann::json> records;
  for (const std::string& line : ReadLines(scratch.path() + "/" + name)) records.push_back(nlohmann::json::parse(line));
  return records;
}

TEST(TokenWidth, AUint32FileTrainsExactlyAsTheUint16FileOfTheSameIds) {
  ScratchDir scratch("poplar_token_width");
  WriteModelConfig(scratch);
  const std::string narrow = WriteTokens(scratch, 6000);
  const std::string wide = WidenedTokens(scratch, narrow, "wide.bin");
  const std::string narrow_eval = WriteTokens(scratch, 1000, "eval.bin", "a stitch in time saves nine");
  const std::string wide_eval = WidenedTokens(scratch, narrow_eval, "wide-eval.bin");
  const std::string plan = WritePlan(scratch, "plan.json", 2, {{5, 3}, {4, 2}});
  const std::vector<std::array<std::string, 3>> runs = {{"narrow", narrow, narrow_eval}, {"wide", wide, wide_eval}};
  for (const auto& [name, data, eval] : runs) {
    std::vector<std::string> args =
        TrainCommand(scratch, plan, 3,
                     {"--lr", "1e-3", "--timeout", "60", "--save", name + ".pt", "--metrics", name + ".jsonl",
                      "--eval-data", eval, "--eval-samples", "20"});
    *(std::find(args.begin(), args.end(), "--data") + 1) = data;
    const JobOutcome job = RunJob(scratch, 2, args);
    ASSERT_TRUE(job.AllSucceeded()) << name << ": " << job.Describe();
  }
  EXPECT_EQ(MaxAbsDifference(ReadStateDict(scratch.path() + "/narrow.pt"), ReadStateDict(scratch.path() + "/wide.pt")),
            0.0);
  const auto narrow_records = Records(scratch, "narrow.jsonl"), wide_records = Records(scratch, "wide.jsonl");
  ASSERT_EQ(narrow_records.size(), 3u);
  ASSERT_EQ(wide_records.size(), 3u);
  EXPECT_EQ(narrow_records[2]["loss"], wide_records[2]["loss"]);
  EXPECT_EQ(narrow_records[2]["val_loss"], wide_records[2]["val_loss"]);
}

TEST(TokenWidth, ALlamaOfSeventyThousandTokensTrainsOnIdsPastUint16) {
  ScratchDir scratch("poplar_token_width_llama");
  WriteLlamaOfVocabulary(scratch, 70000);
  WriteWideTokens(scratch, 4000, "tokens.bin");
  const std::string eval = WriteWideTokens(scratch, 500, "eval.bin");
  const std::string plan = WritePlan(scratch, "plan.json", 3, {{3, 1}, {2, 2}});
  const JobOutcome job = RunJob(scratch, 2,
                                TrainCommand(scratch, plan, 2,
                                             {"--lr", "1e-2", "--timeout", "60", "--metrics", "metrics.jsonl",
                                              "--eval-data", eval, "--eval-samples", "8", "--save", "model.pt"}));
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  const auto records = Records(scratch, "metrics.jsonl");
  ASSERT_EQ(records.size(), 2u);
  // The first step's loss is near log(70000) = 11.16: every id counts.
  EXPECT_NEAR(records[0]["loss"].get<double>(), std::log(70000.0), 0.5) << records[0];
  EXPECT_TRUE(std::isfinite(records[1]["val_loss"].get<double>())) << records[1];
  EXPECT_EQ(ReadStateDict(scratch.path() + "/model.pt").at("model.embed_tokens.weight").size(0), 70000);
}

TEST(TokenWidth, ABadUint32FileIsRefusedNamingTheFileAndTheByte) {
  ScratchDir scratch("poplar_token_width_bad");
  WriteLlamaOfVocabulary(scratch, 70000);
  const std::string plan = WritePlan(scratch, "plan.json", 0, {{2}});
  std::string past = TokenFileHeader(32);
  for (std::uint32_t id : {1u, 2u, 3u, 4u, 5u, 70000u, 6u}) AppendToken(past, id, 32);
  std::string version = TokenFileHeader(32);
  version[8] = 2;
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {past + std::string(200, '\0'), {"token 5 (byte 36)", "id 70000", "vocabulary of 70000"}},
      {version + std::string(200, '\0'), {"byte 8 (header version)", "is 2"}},
      {past.substr(0, 10), {"byte 10 (header)", "ends inside the 16-byte header"}},
      {TokenFileHeader(32) + std::string(202, '\0'), {"byte 216", "ends inside a token"}},
  };
  for (const auto& [bytes, words] : cases) {
    SCOPED_TRACE(words.front());
    const std::string tokens = scratch.Write("tokens.bin", bytes);
    const JobOutcome job = RunJob(scratch, 1, TrainCommand(scratch, plan, 1, {"--timeout", "30"}));
    ASSERT_EQ(job.exit_codes, std::vector<int>{1}) << job.Describe();
    EXPECT_TRUE(ContainsAll(job.errors[0], {tokens, "poplar-worker[rank 0]: error:"})) << job.errors[0];
    for (const std::string& word : words) EXPECT_TRUE(Contains(job.errors[0], word)) << job.errors[0];
  }
}

}  // namespace
}  // namespace poplar::testing
