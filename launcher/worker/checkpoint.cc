#include "launcher/worker/checkpoint.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <stdexcept>
#include <vector>

#include "planner/base/input_error.h"
#include "planner/base/json_fields.h"
#include "planner/base/text_file.h"
#include "planner/formats/checkpoint_meta.h"

namespace poplar {
namespace {

namespace fs = std::filesystem;

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

// Checkpoint files are regular files: a pipe's read would block past --timeout.
std::string ReadCheckpointText(const fs::path& path) {
  RequireRegularFile(path.string());
  return ReadTextFile(path.string());
}

StateDict ReadCheckpointTensors(const fs::path& path) {
  RequireRegularFile(path.string());
  return ReadStateDict(path.string());
}

// The process that named a temporary `name` in a checkpoint folder: WriteCheckpoint's
// ".step-NNNNNNNN.tmpPID" and ".step-NNNNNNNN.oldPID", WriteFileAtomically's
// "latest.tmp.PID"; 0 for any other name.
long WriterOfTemporary(const std::string& name) {
  static const std::regex kStepTemporary(R"(\.step-[0-9]{8,18}\.(?:tmp|old)([1-9][0-9]{0,8}))");
  std::smatch match;
  if (std::regex_match(name, match, kStepTemporary)) return std::stol(match[1].str());
  return AtomicWriteTemporaryOwner(name, "latest");
}

// The step folder `path` names: itself, or the one its `latest` names.
fs::path StepFolder(const std::string& path) {
  fs::path folder = path;
  std::error_code error;
  if (!fs::is_directory(folder, error)) throw InputError(path, "", "is not a folder");
  if (fs::exists(folder / "latest", error)) {
    const std::string latest = (folder / "latest").string();
    const std::string name = Trimmed(ReadCheckpointText(latest));
    // Only a step folder beside it: never a path that leads out of the checkpoint folder.
    if (!StepOfFolderName(name)) {
      // Shown up to a line end or any other control character (a NUL would end the line).
      const auto control =
          std::find_if(name.begin(), name.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; });
      const std::string shown = name.substr(0, std::min<std::size_t>(control - name.begin(), 80));
      throw InputError(latest, "",
                       "must name a step folder beside it (step-NNNNNNNN), got '" + shown +
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

// `folder`'s meta.json, checked against `config` and the folder's name.
CheckpointMeta ReadMeta(const fs::path& folder, const ModelConfig& config) {
  const std::string meta_path = (folder / "meta.json").string();
  CheckpointMeta meta = ParseCheckpointMeta(ReadCheckpointText(meta_path), meta_path);
  if (meta.model != nlohmann::json(ModelConfigObject(config))) {
    throw InputError(meta_path, "model",
                     "was trained with " + meta.model.dump() + ", not the --model-config " + ModelConfigJson(config));
  }
  // A step folder's name and its meta.json agree (a copied or edited folder may not).
  fs::path named = folder.lexically_normal();
  if (named.filename().empty()) named = named.parent_path();  // "step-00000002/"
  const auto named_step = StepOfFolderName(named.filename().string());
  if (named_step && *named_step != meta.step) {
    throw InputError(
        meta_path, "step",
        "is " + std::to_string(meta.step) + " but its folder is named for step " + std::to_string(*named_step));
  }
  return meta;
}

// The run that wrote the step folder `folder` (0: one that records none), from its
// meta.json; nullopt when that cannot be read. Only the line's keys are read, not the
// whole file (ParseCheckpointMeta): pruning must place a folder on the line even when
// the rest of its meta.json would be refused.
std::optional<std::uint64_t> RunThatWrote(const fs::path& folder) {
  try {
    const std::string meta_path = (folder / "meta.json").string();
    const nlohmann::json meta = ParseJsonObject(ReadCheckpointText(meta_path), meta_path);
    JsonFields fields(meta, meta_path, "");
    return ReadLineKeys(fields).run;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::string StepFolderName(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

void RequireFiniteState(const StateDict& tensors, std::int64_t step, const std::string& not_written) {
  for (const auto& [name, tensor] : tensors) {
    if (tensor.is_floating_point() && !torch::isfinite(tensor).all().item<bool>()) {
      throw std::runtime_error("training diverged at step " + std::to_string(step) + ": " + name +
                               " holds inf or nan after its update, so " + not_written +
                               ". Lower --lr, or clip with --grad-clip");
    }
  }
}

void WriteCheckpoint(const std::string& dir, const Checkpoint& checkpoint, const ModelConfig& config,
                     const TrainingRecipe& training, const CheckpointLine& line) {
  // A state to go on from: one whose update overflowed (a finite loss computed before
  // it, then inf or nan in the parameters or moments) would only diverge again on resume.
  const std::string not_written = "its checkpoint was not written (the newest written one stays the last good state)";
  RequireFiniteState(checkpoint.model, checkpoint.step, not_written);
  StateDict optimizer;
  for (const auto& [name, moments] : checkpoint.moments) {
    optimizer["exp_avg." + name] = moments.exp_avg;
    optimizer["exp_avg_sq." + name] = moments.exp_avg_sq;
  }
  RequireFiniteState(optimizer, checkpoint.step, not_written);
  fs::create_directories(dir);
  const std::string final_name = StepFolderName(checkpoint.step);
  const fs::path temporary = fs::path(dir) / ("." + final_name + ".tmp" + std::to_string(::getpid()));
  fs::remove_all(temporary);
  try {
    fs::create_directories(temporary);
    WriteStateDict((temporary / "model.pt").string(), checkpoint.model);
    WriteStateDict((temporary / "optimizer.pt").string(), optimizer);
    nlohmann::ordered_json meta = {
        {"format", kCheckpointFormat}, {"step", checkpoint.step}, {"model", nlohmann::json(ModelConfigObject(config))}};
    meta["training"] = RecipeObject(training);
    AddLineKeys(line, meta);
    if (checkpoint.loss_scale) meta["loss_scale"] = LossScaleObject(*checkpoint.loss_scale);
    if (checkpoint.batch) meta["batch"] = BatchObject(*checkpoint.batch);
    WriteFileAtomically((temporary / "meta.json").string(), meta.dump(2) + "\n");
    // On the disk before any name leads to it, so that a power loss cannot leave `latest`
    // naming a folder of empty files: the files are (WriteStateDict and meta.json go
    // through WriteFileAtomically, which flushes them), and so are their names in the
    // folder.
    SyncToDisk(temporary.string());
  } catch (...) {
    // A full disk leaves no gigabytes of half a checkpoint behind.
    std::error_code ignored;
    fs::remove_all(temporary, ignored);
    throw;
  }
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

std::int64_t CheckpointStep(const std::string& path, const ModelConfig& config) {
  return ReadMeta(StepFolder(path), config).step;
}

RestoredCheckpoint RestoreCheckpoint(const std::string& path, const ModelConfig& config, Decoder& model) {
  const fs::path folder = StepFolder(path);
  RestoredCheckpoint restored;
  CheckpointMeta meta = ReadMeta(folder, config);
  restored.step = meta.step;
  restored.training = std::move(meta.training);
  restored.line = std::move(meta.line);
  restored.loss_scale = meta.loss_scale;
  restored.batch = std::move(meta.batch);
  const std::string model_path = (folder / "model.pt").string();
  LoadModelState(*model, ReadCheckpointTensors(model_path), model_path);

  const std::string optimizer_path = (folder / "optimizer.pt").string();
  StateDict optimizer = ReadCheckpointTensors(optimizer_path);
  // Takes the moment `key` out of `optimizer`, with the shape of `parameter`; what is
  // left at the end belongs to no parameter.
  const auto take = [&](const std::string& key, const torch::Tensor& parameter) {
    const auto found = optimizer.find(key);
    if (found == optimizer.end()) throw InputError(optimizer_path, key, "is missing");
    if (found->second.sizes() != parameter.sizes()) {
      throw InputError(optimizer_path, key,
                       "has shape " + ShapeText(found->second) + ", the parameter has " + ShapeText(parameter));
    }
    const torch::Tensor moment = found->second;
    optimizer.erase(found);
    return moment;
  };
  for (const auto& [name, parameter] : model->NamedParameters()) {
    restored.moments[name] = {take("exp_avg." + name, parameter), take("exp_avg_sq." + name, parameter)};
  }
  if (!optimizer.empty()) {
    throw InputError(optimizer_path, optimizer.begin()->first,
                     "is not a moment of this model's parameters (exp_avg.NAME or exp_avg_sq.NAME)");
  }
  return restored;
}

void PruneCheckpoints(const std::string& dir, std::int64_t keep, const CheckpointLine& line) {
  if (keep <= 0) return;
  // Pruning costs disk when it fails, never the run: what it cannot read or remove stays.
  std::string latest;
  try {
    latest = Trimmed(ReadTextFile((fs::path(dir) / "latest").string()));
  } catch (const InputError&) {
  }
  if (!StepOfFolderName(latest)) return;
  std::vector<std::pair<std::int64_t, fs::path>> steps;  // every step folder, newest first
  std::error_code error;
  for (const fs::path& entry : FolderEntries(dir)) {
    const auto step = StepOfFolderName(entry.filename().string());
    if (step && fs::is_directory(entry, error)) steps.emplace_back(*step, entry);
  }
  std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::optional<std::int64_t> oldest_kept;
  std::int64_t kept = 0;
  for (const auto& [step, path] : steps) {
    const std::optional<std::uint64_t> writer = RunThatWrote(path);
    if (writer && line.Holds(*writer, step) && ++kept == keep) {
      oldest_kept = step;
      break;
    }
  }
  if (!oldest_kept) return;
  for (const auto& [step, path] : steps) {
    if (step >= *oldest_kept || path.filename() == latest) continue;
    if (fs::remove_all(path, error); error) {
      // One write (the writer's thread prints it beside the main thread's progress lines).
      std::cerr << ("poplar-worker[rank 0]: warning: --keep-checkpoints: cannot remove " + path.string() + ": " +
                    error.message() + "; it stays\n");
    }
  }
}

void PrepareCheckpointFolder(const std::string& dir, const std::string& flag) {
  MakeOutputFolder(dir, flag);
  RequireWritableFolder(dir, flag);
  std::error_code error;
  const fs::path latest = fs::path(dir) / "latest";
  const fs::file_status status = fs::symlink_status(latest, error);
  if (fs::exists(status) && !fs::is_regular_file(fs::status(latest, error))) {
    throw InputError(latest.string(), "",
                     "is not a regular file, so no checkpoint could be recorded in " + dir +
                         "; remove it or choose another " + flag);
  }
}

namespace {

// Removes the temporaries that writers no longer running (a SIGKILL, a power loss) left
// in `dir`.
void RemoveDeadTemporaries(const std::string& dir) {
  std::error_code error;
  for (const fs::path& entry : FolderEntries(dir)) {
    if (ProcessIsGone(WriterOfTemporary(entry.filename().string()))) fs::remove_all(entry, error);
  }
}

}  // namespace

std::optional<FolderLock> LockCheckpointFolder(const std::string& dir, const std::string& flag) {
  FolderLock lock = [&] {
    try {
      return FolderLock(dir, ".poplar.lock");
    } catch (const std::runtime_error& error) {
      throw InputError(flag, "", error.what());
    }
  }();
  if (lock.outcome() == FolderLock::Outcome::kHeldByAnother) {
    throw InputError(flag, "",
                     dir + " is being written by another run" + lock.holder() +
                         ": two runs would overwrite each other's checkpoints; give this one another " + flag +
                         ", or resume from that folder with --resume");
  }
  // The temporaries are removed only by the folder's writer, once it holds the lock: a
  // run in another PID namespace, or on another NFS client, would take a live writer's
  // pid for a dead one's.
  RemoveDeadTemporaries(dir);
  if (lock.outcome() == FolderLock::Outcome::kUnsupported) {
    std::cerr << "poplar-worker[rank 0]: warning: " << flag << ": cannot lock " << lock.path() << " (" << lock.reason()
              << "); nothing keeps another run from writing into " << dir << " too\n";
    return std::nullopt;
  }
  return lock;
}

}  // namespace poplar
