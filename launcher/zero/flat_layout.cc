#include "launcher/zero/flat_layout.h"

#include <algorithm>
#include <cmath>

namespace poplar {

std::vector<std::int64_t> ShareSlices(std::int64_t size, const std::vector<double>& shares, int world_size) {
  TORCH_CHECK(shares.empty() || static_cast<int>(shares.size()) == world_size, "ShareSlices: ", shares.size(),
              " shares for ", world_size, " ranks");
  // Running sums of the shares: rank r's slice runs from bounds[r] to bounds[r + 1], as
  // fractions of the whole.
  std::vector<double> bounds(world_size + 1, 0);
  for (int r = 0; r < world_size; ++r) {
    const double share = shares.empty() ? 1 : shares[r];
    TORCH_CHECK(std::isfinite(share) && share >= 0, "ShareSlices: a share must be a finite number >= 0");
    bounds[r + 1] = bounds[r] + share;
  }
  TORCH_CHECK(bounds[world_size] > 0, "ShareSlices: the shares add up to 0");
  const auto boundary = [&](int r) {
    if (r == world_size) return size;
    return std::min(size,
                    static_cast<std::int64_t>(std::floor(static_cast<double>(size) * bounds[r] / bounds[world_size])));
  };
  std::vector<std::int64_t> slices;
  for (int r = 0; r < world_size; ++r) slices.push_back(boundary(r + 1) - boundary(r));
  return slices;
}

int LayoutWorldSize(int world_size, const std::vector<double>& shares) {
  return world_size == 1 && shares.size() > 1 ? static_cast<int>(shares.size()) : world_size;
}

FlatLayout::FlatLayout(const std::vector<std::vector<NamedTensor>>& buckets, int world_size, int rank, bool sharded,
                       const std::vector<double>& shares)
    : partitioned_(sharded && world_size > 1) {
  std::int64_t offset = 0;
  for (const auto& members : buckets) {
    FlatBucket bucket;
    bucket.begin = offset;
    for (const auto& [name, parameter] : members) {
      bucket.slots.push_back(static_cast<int>(slots_.size()));
      slots_.push_back({name, parameter, offset, parameter.numel(), parameter.sizes().vec(), parameter.dim() >= 2});
      offset += parameter.numel();
    }
    bucket.size = (offset - bucket.begin + world_size - 1) / world_size * world_size;
    offset = bucket.begin + bucket.size;
    bucket.owned_begin = bucket.begin;
    bucket.owned_size = bucket.size;
    if (sharded) {
      bucket.slices = ShareSlices(bucket.size, shares, world_size);
      for (int r = 0; r < rank; ++r) bucket.owned_begin += bucket.slices[r];
      bucket.owned_size = bucket.slices[rank];
    }
    bucket.shard_offset = shard_total_;
    shard_total_ += bucket.owned_size;
    buckets_.push_back(std::move(bucket));
  }
  total_ = offset;
  for (FlatBucket& bucket : buckets_) {
    for (int index : bucket.slots) {
      const auto [begin, end] = OwnedRange(bucket, slots_[index]);
      if (slots_[index].decay && begin < end) bucket.owned_decay.push_back({begin - bucket.owned_begin, end - begin});
    }
  }
}

std::vector<std::vector<NamedTensor>> FlatLayout::BucketsOf(const std::vector<NamedTensor>& parameters,
                                                            std::int64_t bucket_elements) {
  std::vector<std::vector<NamedTensor>> buckets;
  std::int64_t filled = 0;
  for (const auto& parameter : parameters) {
    if (buckets.empty() || filled >= bucket_elements) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(parameter);
    filled += parameter.second.numel();
  }
  return buckets;
}

std::pair<std::int64_t, std::int64_t> FlatLayout::OwnedRange(const FlatBucket& bucket, const FlatSlot& slot) const {
  const std::int64_t begin = std::max(slot.offset, bucket.owned_begin);
  const std::int64_t end = std::min(slot.offset + slot.numel, bucket.owned_begin + bucket.owned_size);
  return {begin, std::max(begin, end)};
}

}  // namespace poplar
