// Reading state dicts that Python's torch.save wrote (--init): tensors that share a
// storage there, as nanoGPT's tied transformer.wte.weight and lm_head.weight do, share
// one here too and pass the data-record check (a nanoGPT state dict is not "damaged or
// truncated"); a record cut short is still refused.
//
// data/python_tied_state_dict.pt was written by Python (PyTorch 1.13):
//   tied = torch.arange(6, dtype=torch.float32).reshape(2, 3)
//   torch.save({"a": tied, "b": tied.detach(), "c": tied * 2 + 1}, "python_tied_state_dict.pt")
// ("b" is another tensor on the same storage, as state_dict() gives for tied weights;
// the same tensor object twice would be pickled once), and data/python_cuda_tied_state_dict.pt
// the same with torch.serialization.location_tag returning "cuda:0", as a GPU model's
// state dict is saved.
#include "launcher/model/state_dict.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "planner/base/input_error.h"
#include "worker_harness.h"

namespace poplar::testing {
namespace {

const std::string kTied = POPLAR_TEST_DATA_DIR "/python_tied_state_dict.pt";

// Read on the CPU, wherever they were saved from: the worker moves the model to its
// device after loading it, and a CPU worker has no GPU to put them on.
TEST(StateDict, TensorsThatSharedAStorageInPythonShareOneHereOnTheCpu) {
  for (const std::string& path : {kTied, std::string(POPLAR_TEST_DATA_DIR "/python_cuda_tied_state_dict.pt")}) {
    SCOPED_TRACE(path);
    const StateDict tensors = ReadStateDict(path);
    ASSERT_EQ(tensors.size(), 3u);
    const auto expected = torch::arange(6, torch::kFloat32).reshape({2, 3});
    EXPECT_TRUE(torch::equal(tensors.at("a"), expected));
    EXPECT_TRUE(torch::equal(tensors.at("b"), expected));
    EXPECT_TRUE(torch::equal(tensors.at("c"), expected * 2 + 1));
    EXPECT_TRUE(tensors.at("a").device().is_cpu());
    EXPECT_EQ(tensors.at("a").storage().data(), tensors.at("b").storage().data());
  }
}

TEST(StateDict, APythonFileWithARecordCutShortIsRefused) {
  ScratchDir scratch("poplar_state_dict");
  const std::string torn = scratch.path() + "/torn.pt";
  std::filesystem::copy_file(kTied, torn);
  TruncateDataRecord(torn, "data/1", 8);  // c's 24 bytes
  try {
    ReadStateDict(torn);
    ADD_FAILURE() << "a record cut short was read";
  } catch (const InputError& error) {
    EXPECT_TRUE(Contains(error.what(), "is damaged or truncated: no data record holds the 24 bytes of "))
        << error.what();
  }
}

// data/python_overflowing_{stride,offset}_state_dict.pt are python_tied_state_dict.pt
// with "a"'s stride set to (2^62, 1) or its storage offset to 2^61 in data.pkl (the
// pickle rewritten with stand-ins for torch's classes, the records as they were). The
// bounds check's arithmetic must not wrap and let them through to the copy.
TEST(StateDict, AStrideOrOffsetThatOverflowsIsRefusedNotFollowed) {
  for (const std::string name : {"stride", "offset"}) {
    SCOPED_TRACE(name);
    const std::string path = POPLAR_TEST_DATA_DIR "/python_overflowing_" + name + "_state_dict.pt";
    try {
      ReadStateDict(path);
      ADD_FAILURE() << "read";
    } catch (const InputError& error) {
      EXPECT_EQ(error.key(), "a");
      EXPECT_TRUE(Contains(error.reason(), "reaches beyond any storage")) << error.what();
    }
  }
}

// data/python_version99_state_dict.pt is python_tied_state_dict.pt with its `version`
// record set to 99 (rewritten by Python's zipfile), named as such rather than in
// libtorch's words ("[enforce fail at inline_container.cc:165] ...").
TEST(StateDict, AFileFromANewerPyTorchIsSaidToBeOne) {
  try {
    ReadStateDict(POPLAR_TEST_DATA_DIR "/python_version99_state_dict.pt");
    ADD_FAILURE() << "read";
  } catch (const InputError& error) {
    EXPECT_TRUE(Contains(error.reason(), "was written by a newer PyTorch, in file format 99; this worker's libtorch "))
        << error.what();
    EXPECT_FALSE(Contains(error.reason(), "enforce fail")) << error.what();
  }
}

}  // namespace
}  // namespace poplar::testing
