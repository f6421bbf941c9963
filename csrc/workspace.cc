// The kernels' workspaces (packed weights, per-thread packed operands, float64 sums): 64-byte
// aligned blocks, recycled across calls.  A call's workspace is often a few MiB; fresh blocks of
// that size come from mmap, and faulting their pages in cost up to a tenth of a short call (B = 1).
// Freed blocks of at least kMinCachedBytes are kept (at most kCacheBlocks, kCacheBytes in all,
// the oldest given back first) and handed out again for a request of up to their size and at
// least half of it.  Each block has a 64-byte header holding its size.  After fork() the child
// starts with an empty cache (the parent's lock may have been held).
#include <pthread.h>

#include <cstdlib>
#include <mutex>
#include <new>

#include "engine.h"

namespace fusedrnn {

namespace {

constexpr size_t kHeader = 64;
constexpr size_t kMinCachedBytes = size_t(64) << 10;
constexpr size_t kCacheBytes = size_t(256) << 20;
constexpr int kCacheBlocks = 16;

struct Cache {
  std::mutex mutex;
  char* blocks[kCacheBlocks] = {};  // oldest first; each starts with its header
  int count = 0;
  size_t total = 0;
};

Cache* new_cache();
Cache* the_cache = new_cache();  // never destroyed (blocks in it stay reachable)

void reset_after_fork() { the_cache = new Cache(); }

Cache* new_cache() {
  pthread_atfork(nullptr, nullptr, &reset_after_fork);
  return new Cache();
}

size_t& block_size(char* block) { return *reinterpret_cast<size_t*>(block); }

}  // namespace

void* workspace_alloc(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64 + kHeader;
  if (rounded >= kMinCachedBytes) {
    Cache* cache = the_cache;
    std::lock_guard<std::mutex> lock(cache->mutex);
    int best = -1;
    for (int i = 0; i < cache->count; ++i) {
      const size_t size = block_size(cache->blocks[i]);
      if (size >= rounded && size / 2 <= rounded &&
          (best < 0 || size < block_size(cache->blocks[best])))
        best = i;
    }
    if (best >= 0) {
      char* block = cache->blocks[best];
      cache->total -= block_size(block);
      for (int i = best + 1; i < cache->count; ++i) cache->blocks[i - 1] = cache->blocks[i];
      --cache->count;
      return block + kHeader;
    }
  }
  char* block = static_cast<char*>(std::aligned_alloc(64, rounded));
  if (!block) throw std::bad_alloc();
  block_size(block) = rounded;
  return block + kHeader;
}

void workspace_free(void* p) {
  if (!p) return;
  char* block = static_cast<char*>(p) - kHeader;
  const size_t size = block_size(block);
  if (size >= kMinCachedBytes && size <= kCacheBytes) {
    Cache* cache = the_cache;
    std::lock_guard<std::mutex> lock(cache->mutex);
    while (cache->count == kCacheBlocks || (cache->count && cache->total + size > kCacheBytes)) {
      char* oldest = cache->blocks[0];
      cache->total -= block_size(oldest);
      for (int i = 1; i < cache->count; ++i) cache->blocks[i - 1] = cache->blocks[i];
      --cache->count;
      std::free(oldest);
    }
    cache->blocks[cache->count++] = block;
    cache->total += size;
    return;
  }
  std::free(block);
}

void workspace_release_cached() {
  Cache* cache = the_cache;
  std::lock_guard<std::mutex> lock(cache->mutex);
  for (int i = 0; i < cache->count; ++i) std::free(cache->blocks[i]);
  cache->count = 0;
  cache->total = 0;
}

}  // namespace fusedrnn
