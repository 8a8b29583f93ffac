// libc10_cuda.so of the stand-in torch (tests/torch/test_torch.py builds it per release):
// a caching allocator in PyTorch's manner, enough to drive memtap's tracker through the
// header's entry points. Segments come from cudaMalloc (simgpu under the tests): 2 MiB for
// requests up to 1 MiB, 20 MiB up to 10 MiB, else the request rounded up to 2 MiB; blocks
// are requests rounded up to 512 bytes, split from a segment's free blocks, merged back
// when freed. Trace entries as torch makes them: ALLOC with the size asked for,
// FREE_REQUESTED and FREE_COMPLETED, SEGMENT_ALLOC after cudaMalloc, SEGMENT_FREE before
// cudaFree, OOM when a segment cannot be had even after the cache is emptied.
// PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync picks an allocator without a tracker.
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <c10/cuda/CUDACachingAllocator.h>

extern "C" int cudaMalloc(void **p, size_t n);
extern "C" int cudaFree(void *p);
extern "C" int cudaMemGetInfo(size_t *free_bytes, size_t *total);

namespace c10
{
namespace cuda
{
namespace CUDACachingAllocator
{

namespace
{

struct Block {
	size_t size, requested;
	uintptr_t segment;
	bool used;
};

class Native : public CUDAAllocator
{
	std::recursive_mutex mutex;
	std::vector<AllocatorTraceTracker> trackers;
	std::map<uintptr_t, Block> blocks;    // every block of every segment, by address
	std::map<uintptr_t, size_t> segments; // address -> size
	bool ready = false;

	void trace(TraceEntry::Action a, uintptr_t addr, size_t size)
	{
		TraceEntry e(a, 0, (trace_size_t)addr, (trace_size_t)size, nullptr);
		for (auto &t : trackers)
			t(e);
	}

	static size_t segment_size(size_t n)
	{
		if (n <= (1u << 20))
			return 2u << 20;
		if (n <= (10u << 20))
			return 20u << 20;
		return (n + (2u << 20) - 1) / (2u << 20) * (2u << 20);
	}

	bool small(size_t seg)
	{
		return seg == (2u << 20);
	}

	std::map<uintptr_t, Block>::iterator fit(size_t n)
	{
		for (auto it = blocks.begin(); it != blocks.end(); ++it)
			if (!it->second.used && it->second.size >= n &&
			    small(segments[it->second.segment]) == (n <= (1u << 20)))
				return it;
		return blocks.end();
	}

	void release_free_segments()
	{
		for (auto s = segments.begin(); s != segments.end();) {
			auto b = blocks.find(s->first);
			if (b != blocks.end() && !b->second.used && b->second.size == s->second) {
				trace(TraceEntry::SEGMENT_FREE, s->first, s->second);
				cudaFree((void *)s->first);
				blocks.erase(b);
				s = segments.erase(s);
			} else {
				++s;
			}
		}
	}

      public:
	void init(int) override
	{
		ready = true;
	}
	bool initialized() override
	{
		return ready;
	}
#if STANDIN_TORCH >= 202
	void attachAllocatorTraceTracker(AllocatorTraceTracker t) override
	{
		std::lock_guard<std::recursive_mutex> g(mutex);
		trackers.push_back(std::move(t));
	}
#endif
	void *raw_alloc(size_t asked) override
	{
		std::lock_guard<std::recursive_mutex> g(mutex);
		size_t n = asked < 512 ? 512 : (asked + 511) / 512 * 512;
		auto it = fit(n);
		if (it == blocks.end()) {
			size_t seg = segment_size(n);
			void *p = nullptr;
			if (cudaMalloc(&p, seg) != 0) {
				release_free_segments();
				if (cudaMalloc(&p, seg) != 0) {
					size_t free_bytes = 0, total = 0;
					cudaMemGetInfo(&free_bytes, &total);
					trace(TraceEntry::OOM, free_bytes, n);
					return nullptr;
				}
			}
			segments[(uintptr_t)p] = seg;
			trace(TraceEntry::SEGMENT_ALLOC, (uintptr_t)p, seg);
			it = blocks.emplace((uintptr_t)p, Block{seg, 0, (uintptr_t)p, false}).first;
		}
		Block &b = it->second;
		size_t rest = b.size - n;
		if (rest >= (small(segments[b.segment]) ? 512u : (1u << 20) + 1)) {
			blocks.emplace(it->first + n, Block{rest, 0, b.segment, false});
			b.size = n;
		}
		b.used = true;
		b.requested = asked;
		trace(TraceEntry::ALLOC, it->first, asked);
		return (void *)it->first;
	}
	void raw_delete(void *ptr) override
	{
		std::lock_guard<std::recursive_mutex> g(mutex);
		auto it = blocks.find((uintptr_t)ptr);
		if (it == blocks.end() || !it->second.used)
			return;
		trace(TraceEntry::FREE_REQUESTED, it->first, it->second.requested);
		trace(TraceEntry::FREE_COMPLETED, it->first, it->second.requested);
		it->second.used = false;
		auto next = std::next(it);
		if (next != blocks.end() && !next->second.used && next->second.segment == it->second.segment) {
			it->second.size += next->second.size;
			blocks.erase(next);
		}
		if (it != blocks.begin()) {
			auto prev = std::prev(it);
			if (!prev->second.used && prev->second.segment == it->second.segment) {
				prev->second.size += it->second.size;
				blocks.erase(it);
			}
		}
	}
	void emptyCache() override
	{
		std::lock_guard<std::recursive_mutex> g(mutex);
		release_free_segments();
	}
};

// backend:cudaMallocAsync: every tensor its own allocation, and no tracker
class Async : public CUDAAllocator
{
	bool ready = false;

      public:
	void init(int) override
	{
		ready = true;
	}
	bool initialized() override
	{
		return ready;
	}
#if STANDIN_TORCH >= 202
	void attachAllocatorTraceTracker(AllocatorTraceTracker) override
	{
		throw std::runtime_error("cudaMallocAsync does not yet support trace trackers");
	}
#endif
	void *raw_alloc(size_t n) override
	{
		void *p = nullptr;
		return cudaMalloc(&p, n) == 0 ? p : nullptr;
	}
	void raw_delete(void *p) override
	{
		cudaFree(p);
	}
	void emptyCache() override
	{
	}
};

CUDAAllocator *choose()
{
	const char *conf = getenv("PYTORCH_CUDA_ALLOC_CONF");
	if (conf && strstr(conf, "backend:cudaMallocAsync"))
		return new Async;
	return new Native;
}

} // namespace

std::atomic<CUDAAllocator *> allocator{choose()};

} // namespace CUDACachingAllocator
} // namespace cuda
} // namespace c10

namespace cca = c10::cuda::CUDACachingAllocator;

extern "C" {
void standin_init(void)
{
	cca::get()->init(1);
}
void *standin_malloc(size_t n)
{
	return cca::get()->raw_alloc(n);
}
void standin_free(void *p)
{
	cca::get()->raw_delete(p);
}
void standin_empty_cache(void)
{
	cca::get()->emptyCache();
}
}
