// FlatLayout's slices (launcher/zero/flat_layout.h): every rank's share of every bucket,
// the slices partitioning each bucket in rank order, the even split as ZeRO's 1/N.
#include "launcher/zero/flat_layout.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace poplar {
namespace {

// Three buckets of awkward sizes: 7 + 5, 11, 3 elements.
std::vector<std::vector<NamedTensor>> Buckets() {
  return {
      {{"a", torch::zeros({7})}, {"b", torch::zeros({5})}}, {{"c", torch::zeros({11})}}, {{"d", torch::zeros({3})}}};
}

// Each rank's layout for `shares` (empty: even).
std::vector<FlatLayout> Layouts(int world, const std::vector<double>& shares) {
  std::vector<FlatLayout> layouts;
  for (int rank = 0; rank < world; ++rank) layouts.emplace_back(Buckets(), world, rank, true, shares);
  return layouts;
}

TEST(FlatLayout, SlicesFollowTheSharesAndPartitionEveryBucket) {
  for (const std::vector<double>& shares : std::vector<std::vector<double>>{{3, 0, 1}, {0.5, 2, 0.25}, {0, 0, 9}}) {
    const auto layouts = Layouts(3, shares);
    const double sum = std::accumulate(shares.begin(), shares.end(), 0.0);
    for (std::size_t b = 0; b < layouts[0].buckets().size(); ++b) {
      const FlatBucket& first = layouts[0].buckets()[b];
      EXPECT_EQ(first.size % 3, 0);
      std::int64_t next = first.begin;
      for (int rank = 0; rank < 3; ++rank) {
        const FlatBucket& bucket = layouts[rank].buckets()[b];
        EXPECT_EQ(bucket.slices, first.slices) << "every rank computes the same slices";
        EXPECT_EQ(bucket.owned_begin, next) << "rank " << rank << " follows rank " << rank - 1;
        EXPECT_EQ(bucket.owned_size, first.slices[rank]);
        // Within one element of the exact fraction.
        EXPECT_NEAR(static_cast<double>(bucket.owned_size), bucket.size * shares[rank] / sum, 1.0);
        if (shares[rank] == 0) {
          EXPECT_EQ(bucket.owned_size, 0);
        }
        next += bucket.owned_size;
      }
      EXPECT_EQ(next, first.begin + first.size);
    }
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_TRUE(layouts[rank].partitioned()) << "a rank holding everything or nothing still takes part";
    }
  }
}

TEST(FlatLayout, EqualSharesAreTheEvenSplit) {
  const auto even = Layouts(3, {});
  const auto equal = Layouts(3, {2, 2, 2});
  for (int rank = 0; rank < 3; ++rank) {
    for (std::size_t b = 0; b < even[rank].buckets().size(); ++b) {
      const FlatBucket& bucket = even[rank].buckets()[b];
      EXPECT_EQ(bucket.owned_size, bucket.size / 3);
      EXPECT_EQ(bucket.owned_begin, bucket.begin + rank * bucket.size / 3);
      EXPECT_EQ(equal[rank].buckets()[b].owned_begin, bucket.owned_begin);
      EXPECT_EQ(equal[rank].buckets()[b].slices, bucket.slices);
    }
  }
}

TEST(FlatLayout, UnshardedOwnsEverythingWithNoSlices) {
  const FlatLayout layout(Buckets(), 3, 1, false, {3, 0, 1});
  EXPECT_FALSE(layout.partitioned());
  EXPECT_EQ(layout.shard_total(), layout.total());
  for (const FlatBucket& bucket : layout.buckets()) EXPECT_TRUE(bucket.slices.empty());
}

}  // namespace
}  // namespace poplar
