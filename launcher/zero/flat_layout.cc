#include "launcher/zero/flat_layout.h"

#include <algorithm>

namespace poplar {

FlatLayout::FlatLayout(const std::vector<std::vector<NamedTensor>>& buckets, int world_size, int rank, bool sharded) {
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
    bucket.owned_size = sharded ? bucket.size / world_size : bucket.size;
    bucket.owned_begin = bucket.begin + (sharded ? rank * bucket.owned_size : 0);
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
