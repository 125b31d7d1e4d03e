// FlatLayout: where every parameter sits in ZeRO's flat buffers, and which slice of
// each bucket this rank owns.
//
// Parameters are laid end to end in bucket order; a bucket holds whole parameters and
// is padded to a multiple of the world size. When sharded, every rank owns one slice of
// every bucket, in rank order: with state shares s (the plan's, docs/formats.md) rank
// r's slice is [floor(size * S_r / S), floor(size * S_{r+1} / S)), S_r the sum of the
// shares before r and S of all, so slices differ from the exact fractions by less than an
// element; ZeRO's even split (all shares equal, or none given) is size / N each. A share
// of 0 owns nothing. Otherwise every rank owns every bucket whole. Owned slices are laid
// end to end in "shard layout" (the optimizer state's layout). Pure arithmetic, the same
// on every rank: no tensors are allocated here.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "launcher/zero/adamw.h"

namespace poplar {

using NamedTensor = std::pair<std::string, torch::Tensor>;

// Every rank's slice of `size` elements under `shares` (FlatLayout's rule: rank r gets
// [floor(size * S_r / S), floor(size * S_{r+1} / S)); empty shares: `world_size` even
// slices of a size that divides evenly), in rank order, adding up to `size`. TORCH_CHECK
// on shares that are not one finite number >= 0 per rank with a positive sum.
std::vector<std::int64_t> ShareSlices(std::int64_t size, const std::vector<double>& shares, int world_size);

// The number of ranks a layout is cut for: `world_size`, except that a rank alone given
// k > 1 shares stands for rank 0 of k ranks whose others are absent. It then holds its
// share of the state alone and computes as that rank would; the Communicator's
// collectives of one rank leave the absent ranks' chunks zero. This is how
// `poplar-worker profile` measures a device that cannot hold the whole state.
int LayoutWorldSize(int world_size, const std::vector<double>& shares);

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
  // When sharded, every rank's slice size in rank order (they add up to `size`), for the
  // collectives; empty when not sharded.
  std::vector<std::int64_t> slices;
  std::int64_t shard_offset = 0;        // where the owned slice sits in shard layout
  std::vector<int> slots;               // indices into FlatLayout::slots()
  std::vector<DecayRange> owned_decay;  // decayed runs, relative to the owned slice
};

class FlatLayout {
 public:
  // `shares`: one finite, non-negative number per rank with a positive sum, or empty for
  // the even split (TORCH_CHECK otherwise: the plan reader refuses bad shares).
  FlatLayout(const std::vector<std::vector<NamedTensor>>& buckets, int world_size, int rank, bool sharded,
             const std::vector<double>& shares = {});

  // Consecutive parameters grouped into buckets of at least `bucket_elements` (the last
  // may be smaller); a parameter is never split.
  static std::vector<std::vector<NamedTensor>> BucketsOf(const std::vector<NamedTensor>& parameters,
                                                         std::int64_t bucket_elements);

  const std::vector<FlatSlot>& slots() const { return slots_; }
  const std::vector<FlatBucket>& buckets() const { return buckets_; }
  std::int64_t total() const { return total_; }
  std::int64_t shard_total() const { return shard_total_; }
  // Whether ranks own different slices (sharded on 2+ ranks): the gradient norm and the
  // full state then need collectives.
  bool partitioned() const { return partitioned_; }

  // The owned part of slot `slot`'s elements: [begin, end) in the flat buffer (empty if
  // this rank owns none of it).
  std::pair<std::int64_t, std::int64_t> OwnedRange(const FlatBucket& bucket, const FlatSlot& slot) const;

 private:
  std::vector<FlatSlot> slots_;
  std::vector<FlatBucket> buckets_;
  std::int64_t total_ = 0;
  std::int64_t shard_total_ = 0;
  bool partitioned_ = false;
};

}  // namespace poplar
