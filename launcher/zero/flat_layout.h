// FlatLayout: where every parameter sits in ZeRO's flat buffers, and which slice of
// each bucket this rank owns.
//
// Parameters are laid end to end in bucket order; a bucket holds whole parameters and
// is padded to a multiple of the world size. When sharded, rank r owns the r-th 1/N
// slice of every bucket; otherwise it owns every bucket whole. Owned slices are laid
// end to end in "shard layout" (the optimizer state's layout). Pure arithmetic: no
// tensors are allocated here.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "launcher/zero/adamw.h"

namespace poplar {

using NamedTensor = std::pair<std::string, torch::Tensor>;

struct FlatSlot {
  std::string name;
  torch::Tensor parameter;
  std::int64_t offset = 0;  // in the flat buffer
  std::int64_t numel = 0;
  std::vector<std::int64_t> shape;  // as laid out (ZeRO-3 empties parameters between uses)
  bool decay = false;               // two or more dimensions
};

struct FlatBucket {
  std::int64_t begin = 0;        // in the flat buffer
  std::int64_t size = 0;         // padded to a multiple of the world size
  std::int64_t owned_begin = 0;  // this rank's slice, in the flat buffer
  std::int64_t owned_size = 0;
  std::int64_t shard_offset = 0;        // where the owned slice sits in shard layout
  std::vector<int> slots;               // indices into FlatLayout::slots()
  std::vector<DecayRange> owned_decay;  // decayed runs, relative to the owned slice
};

class FlatLayout {
 public:
  FlatLayout(const std::vector<std::vector<NamedTensor>>& buckets, int world_size, int rank, bool sharded);

  // Consecutive parameters grouped into buckets of at least `bucket_elements` (the last
  // may be smaller); a parameter is never split.
  static std::vector<std::vector<NamedTensor>> BucketsOf(const std::vector<NamedTensor>& parameters,
                                                         std::int64_t bucket_elements);

  const std::vector<FlatSlot>& slots() const { return slots_; }
  const std::vector<FlatBucket>& buckets() const { return buckets_; }
  std::int64_t total() const { return total_; }
  std::int64_t shard_total() const { return shard_total_; }

  // The owned part of slot `slot`'s elements: [begin, end) in the flat buffer (empty if
  // this rank owns none of it).
  std::pair<std::int64_t, std::int64_t> OwnedRange(const FlatBucket& bucket, const FlatSlot& slot) const;

 private:
  std::vector<FlatSlot> slots_;
  std::vector<FlatBucket> buckets_;
  std::int64_t total_ = 0;
  std::int64_t shard_total_ = 0;
};

}  // namespace poplar
