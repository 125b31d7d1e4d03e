#include "launcher/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "planner/input_error.h"
#include "planner/text_file.h"

namespace poplar {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat = "poplar-checkpoint/1";

std::string StepFolderName(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

// Swaps the folders `a` and `b` in one step (renameat2's RENAME_EXCHANGE: Linux 3.15, and
// file systems that support it); false, with nothing changed, where it is not supported.
bool ExchangeFolders(const fs::path& a, const fs::path& b) {
#ifdef SYS_renameat2
  constexpr unsigned kRenameExchange = 1u << 1;  // RENAME_EXCHANGE, <linux/fs.h>
  if (::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), kRenameExchange) == 0) return true;
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
    throw InputError(b.string(), "", std::string("cannot replace with the new checkpoint: ") + std::strerror(errno));
  }
#endif
  return false;
}

// The step a step folder's name says ("step-00000012" -> 12); nullopt for any other name.
std::optional<std::int64_t> StepOfFolderName(const std::string& name) {
  constexpr std::size_t kLeastDigits = 8;  // StepFolderName pads to 8; a step from 1e8 on has more
  if (name.size() < 5 + kLeastDigits || name.size() > 5 + 18 || name.compare(0, 5, "step-") != 0) return std::nullopt;
  std::int64_t step = 0;
  for (std::size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// The step folder `path` names: itself, or the one its `latest` names.
fs::path StepFolder(const std::string& path) {
  fs::path folder = path;
  std::error_code error;
  if (!fs::is_directory(folder, error)) throw InputError(path, "", "is not a folder");
  if (fs::exists(folder / "latest", error)) {
    const std::string latest = (folder / "latest").string();
    const std::string name = Trimmed(ReadTextFile(latest));
    // Only a step folder beside it: never a path that leads out of the checkpoint folder.
    if (!StepOfFolderName(name)) {
      const std::string shown = name.substr(0, std::min<std::size_t>(name.find_first_of("\n\r"), 80));
      throw InputError(latest, "", "must name a step folder beside it (step-NNNNNNNN), got '" + shown +
                                       (shown.size() < name.size() ? "...'" : "'"));
    }
    folder /= name;
    if (!fs::is_directory(folder, error)) {
      throw InputError(latest, "", "names " + name + ", which is not a folder beside it");
    }
  } else if (!fs::exists(folder / "meta.json", error)) {
    throw InputError(path, "", "is neither a checkpoint folder (it has no latest) nor a step folder (no meta.json)");
  }
  return folder;
}

// The step `folder`'s meta.json records, checked against `config` and the folder's name.
std::int64_t ReadMetaStep(const fs::path& folder, const GptConfig& config) {
  const std::string meta_path = (folder / "meta.json").string();
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(ReadTextFile(meta_path));
  } catch (const nlohmann::json::exception& error) {
    throw InputError(meta_path, "", std::string("not valid JSON: ") + error.what());
  }
  if (!meta.is_object() || !meta.contains("format") || meta["format"] != kFormat || !meta.contains("step") ||
      !meta["step"].is_number_integer() || meta["step"].get<std::int64_t>() < 0) {
    throw InputError(meta_path, "", std::string("not a ") + kFormat + " checkpoint description");
  }
  if (meta["model"] != nlohmann::json(ModelConfigObject(config))) {
    throw InputError(meta_path, "model", "was trained with " + meta["model"].dump() +
                                             ", not the --model-config " + ModelConfigJson(config));
  }
  const std::int64_t step = meta["step"].get<std::int64_t>();
  // A step folder's name and its meta.json agree (a copied or edited folder may not).
  fs::path named = folder.lexically_normal();
  if (named.filename().empty()) named = named.parent_path();  // "step-00000002/"
  const auto named_step = StepOfFolderName(named.filename().string());
  if (named_step && *named_step != step) {
    throw InputError(meta_path, "step", "is " + std::to_string(step) + " but its folder is named for step " +
                                            std::to_string(*named_step));
  }
  return step;
}

}  // namespace

void WriteCheckpoint(const std::string& dir, const Checkpoint& checkpoint, const GptConfig& config) {
  fs::create_directories(dir);
  const std::string final_name = StepFolderName(checkpoint.step);
  const fs::path temporary = fs::path(dir) / ("." + final_name + ".tmp" + std::to_string(::getpid()));
  fs::remove_all(temporary);
  fs::create_directories(temporary);
  WriteStateDict((temporary / "model.pt").string(), checkpoint.model);
  StateDict optimizer;
  for (const auto& [name, moments] : checkpoint.moments) {
    optimizer["exp_avg." + name] = moments.exp_avg;
    optimizer["exp_avg_sq." + name] = moments.exp_avg_sq;
  }
  WriteStateDict((temporary / "optimizer.pt").string(), optimizer);
  const nlohmann::json meta = {{"format", kFormat}, {"step", checkpoint.step}, {"model", nlohmann::json(ModelConfigObject(config))}};
  WriteFileAtomically((temporary / "meta.json").string(), meta.dump(2) + "\n");
  // On the disk before any name leads to it, so that a power loss cannot leave `latest`
  // naming a folder of empty files: the files are (WriteStateDict and meta.json go through
  // WriteFileAtomically, which flushes them), and so are their names in the folder.
  SyncToDisk(temporary.string());
  const fs::path final_path = fs::path(dir) / final_name;
  if (!fs::exists(final_path)) {
    fs::rename(temporary, final_path);
  } else if (ExchangeFolders(temporary, final_path)) {
    // An older folder of the same step (a rerun after resuming from an earlier step),
    // which `latest` may name, gave way to the new one in one step; it is at `temporary`.
    fs::remove_all(temporary);
  } else {
    // A file system without the exchange: the old folder moves aside, then the new one
    // takes its name; for that moment a `latest` naming it names no folder.
    const fs::path old_path = fs::path(dir) / ("." + final_name + ".old" + std::to_string(::getpid()));
    fs::rename(final_path, old_path);
    fs::rename(temporary, final_path);
    fs::remove_all(old_path);
  }
  SyncToDisk(dir);
  WriteFileAtomically((fs::path(dir) / "latest").string(), final_name + "\n");
  SyncToDisk(dir);
}

std::int64_t CheckpointStep(const std::string& path, const GptConfig& config) {
  return ReadMetaStep(StepFolder(path), config);
}

Checkpoint ReadCheckpoint(const std::string& path, const GptConfig& config) {
  const fs::path folder = StepFolder(path);
  Checkpoint checkpoint;
  checkpoint.step = ReadMetaStep(folder, config);
  checkpoint.model = ReadStateDict((folder / "model.pt").string());
  const std::string optimizer_path = (folder / "optimizer.pt").string();
  const StateDict optimizer = ReadStateDict(optimizer_path);
  for (const auto& [name, tensor] : checkpoint.model) {
    if (name == kTiedHeadName) continue;
    auto avg = optimizer.find("exp_avg." + name);
    auto avg_sq = optimizer.find("exp_avg_sq." + name);
    if (avg == optimizer.end() || avg_sq == optimizer.end()) {
      throw InputError(optimizer_path, "exp_avg." + name, "is missing");
    }
    if (avg->second.sizes() != tensor.sizes() || avg_sq->second.sizes() != tensor.sizes()) {
      throw InputError(optimizer_path, "exp_avg." + name, "does not have the parameter's shape");
    }
    checkpoint.moments[name] = {avg->second, avg_sq->second};
  }
  return checkpoint;
}

}  // namespace poplar
