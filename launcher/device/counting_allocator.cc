#include "launcher/device/counting_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

namespace poplar {
namespace {

// Each block carries in a header the bytes it counted (0 for host memory), so the
// deleter knows what to subtract; the header is one alignment unit, keeping the data
// 64-byte aligned like libtorch's own CPU allocator.
constexpr std::size_t kHeader = 64;

std::atomic<std::int64_t> in_use{0};
std::atomic<std::int64_t> peak{0};
std::atomic<std::int64_t> capacity{0};
thread_local int host_scopes = 0;  // HostMemory scopes alive on this thread

void Release(void* data) {
  if (data == nullptr) return;
  char* block = static_cast<char*>(data) - kHeader;
  in_use -= static_cast<std::int64_t>(*reinterpret_cast<std::size_t*>(block));
  std::free(block);
}

// libtorch 2.3 made Allocator::allocate non-const and added copy_data.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define POPLAR_ALLOCATE_CONST
#define POPLAR_HAS_COPY_DATA 1
#else
#define POPLAR_ALLOCATE_CONST const
#define POPLAR_HAS_COPY_DATA 0
#endif

class Counting final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t bytes) POPLAR_ALLOCATE_CONST override {
    const auto size = host_scopes > 0 ? 0 : static_cast<std::int64_t>(bytes);
    const std::int64_t now = in_use.fetch_add(size) + size;
    const std::int64_t limit = capacity.load();
    if (limit > 0 && now > limit) {
      in_use -= size;
      TORCH_CHECK_WITH(OutOfMemoryError, false, "emulated device out of memory: tried to allocate ", bytes,
                       " bytes with ", now - size, " of ", limit, " bytes in use");
    }
    std::int64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
    void* raw = nullptr;
    if (::posix_memalign(&raw, kHeader, bytes + kHeader) != 0) {
      in_use -= size;
      TORCH_CHECK_WITH(OutOfMemoryError, false, "out of memory: cannot allocate ", bytes, " bytes");
    }
    char* block = static_cast<char*>(raw);
    *reinterpret_cast<std::size_t*>(block) = static_cast<std::size_t>(size);
    void* data = block + kHeader;
    return {data, data, &Release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &Release; }
#if POPLAR_HAS_COPY_DATA
  void copy_data(void* destination, const void* source, std::size_t bytes) const override {
    std::memcpy(destination, source, bytes);
  }
#endif
};

Counting instance;

}  // namespace

void CountingAllocator::Install() {
  static const bool installed = [] {
    c10::SetCPUAllocator(&instance, /*priority=*/100);
    return true;
  }();
  (void)installed;
}

std::int64_t CountingAllocator::InUse() { return in_use.load(); }
std::int64_t CountingAllocator::Peak() { return peak.load(); }
void CountingAllocator::ResetPeak() { peak = in_use.load(); }
void CountingAllocator::SetCapacity(std::int64_t bytes) { capacity = bytes; }
std::int64_t CountingAllocator::Capacity() { return capacity.load(); }

CountingAllocator::HostMemory::HostMemory() { ++host_scopes; }
CountingAllocator::HostMemory::~HostMemory() { --host_scopes; }

}  // namespace poplar
