// libc10_cuda.so of the stand-in torch (tests/torch/standin.py builds it per release): a
// caching allocator in PyTorch's manner, enough to drive memtap's tracker through the
// header's entry points. Segments come from cudaMalloc (simgpu under the tests): 2 MiB for
// requests up to 1 MiB, 20 MiB up to 10 MiB, else the request rounded up to 2 MiB; blocks
// are requests rounded up to 512 bytes, split from a segment's free blocks, merged back
// when freed. Trace entries as torch makes them: ALLOC with the size asked for,
// FREE_REQUESTED and FREE_COMPLETED, SEGMENT_ALLOC after cudaMalloc, SEGMENT_FREE before
// cudaFree, OOM when a segment cannot be had even after the cache is emptied.
// PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: requests over 1 MiB come from one
// reserved range instead, mapped 20 MiB at a time through the driver's VMM calls as it
// grows (SEGMENT_MAP) and unmapped from its end when the cache is emptied (SEGMENT_UNMAP).
// backend:cudaMallocAsync picks an allocator without a tracker.
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda.h>

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
	bool expandable =
	    getenv("PYTORCH_CUDA_ALLOC_CONF") && strstr(getenv("PYTORCH_CUDA_ALLOC_CONF"), "expandable_segments:True");
	static constexpr size_t CHUNK = 20u << 20, RANGE = 1u << 30;
	CUdeviceptr base = 0; // the expandable segment: [base, base + segments[base]) mapped
	std::vector<CUmemGenericAllocationHandle> handles;

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

	// the expandable segment's last block, if it has one
	std::map<uintptr_t, Block>::iterator tail()
	{
		auto it = base ? blocks.lower_bound(base + segments[base]) : blocks.end();
		if (!base || it == blocks.begin() || (--it)->second.segment != base)
			return blocks.end();
		return it;
	}

	// the expandable segment grown by whole chunks until its free end holds n
	bool grow(size_t n)
	{
		CUmemAllocationProp prop = {};
		CUmemAccessDesc access = {};
		size_t have = 0, mapped = 0, added = 0;

		prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
		access.location = prop.location;
		access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		if (!base) {
			if (cuMemAddressReserve(&base, RANGE, 0, 0, 0) != CUDA_SUCCESS)
				return false;
			segments[base] = 0;
		}
		mapped = segments[base];
		auto last = tail();
		if (last != blocks.end() && !last->second.used)
			have = last->second.size;
		while (have + added < n && mapped + added < RANGE) {
			CUmemGenericAllocationHandle h;
			if (cuMemCreate(&h, CHUNK, &prop, 0) != CUDA_SUCCESS)
				break;
			cuMemMap(base + mapped + added, CHUNK, 0, h, 0);
			cuMemSetAccess(base + mapped + added, CHUNK, &access, 1);
			handles.push_back(h);
			added += CHUNK;
		}
		if (!added)
			return false;
		trace(TraceEntry::SEGMENT_MAP, base + mapped, added);
		segments[base] = mapped + added;
		if (have)
			last->second.size += added;
		else
			blocks.emplace(base + mapped, Block{added, 0, base, false});
		return have + added >= n;
	}

	// whole free chunks at the expandable segment's end, unmapped
	void shrink()
	{
		auto last = tail();
		if (last == blocks.end() || last->second.used)
			return;
		size_t drop = last->second.size / CHUNK * CHUNK, end = segments[base];
		if (!drop)
			return;
		trace(TraceEntry::SEGMENT_UNMAP, base + end - drop, drop);
		for (size_t k = 0; k < drop / CHUNK; k++) {
			cuMemUnmap(base + end - (k + 1) * CHUNK, CHUNK);
			cuMemRelease(handles.back());
			handles.pop_back();
		}
		segments[base] = end - drop;
		if ((last->second.size -= drop) == 0)
			blocks.erase(last);
	}

	void release_free_segments()
	{
		shrink();
		for (auto s = segments.begin(); s != segments.end();) {
			auto b = blocks.find(s->first);
			if (s->first != base && b != blocks.end() && !b->second.used && b->second.size == s->second) {
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
		cudaFree(nullptr); // the device's context, as torch's start-up makes it
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
		if (it == blocks.end() && expandable && n > (1u << 20) &&
		    (grow(n) || (release_free_segments(), grow(n))))
			it = fit(n);
		if (it == blocks.end() && expandable && n > (1u << 20)) {
			size_t free_bytes = 0, total = 0;
			cudaMemGetInfo(&free_bytes, &total);
			trace(TraceEntry::OOM, free_bytes, n);
			return nullptr;
		}
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
