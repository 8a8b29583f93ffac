// memtap's tracker of PyTorch's CUDA caching allocator. memtap run builds it against the
// job's own torch headers (PyTorch 2.2 and later: attachAllocatorTraceTracker, PR #112238)
// and libmemtap.so loads it once the job has loaded torch. The tracker runs on the
// allocating thread under the device's allocator lock: it copies five fields and calls
// memtap, which only stores into its per-thread ring. It never throws, touches no string
// (so the library's C++ ABI does not matter) and needs no torch symbol: the allocator's
// address comes from memtap.
#include <atomic>

#include <c10/cuda/CUDACachingAllocator.h>

#include "torch_tracker.h"

namespace cca = c10::cuda::CUDACachingAllocator;

// The libc10_cuda.so whose headers this was built against (memtap run says): an allocator
// of another torch has other virtual methods, and is never attached to.
#ifndef MEMTAP_TORCH_LIB
#define MEMTAP_TORCH_LIB ""
#endif
extern "C" __attribute__((visibility("default"))) const char memtap_torch_library[] = MEMTAP_TORCH_LIB;

static int action_of(const cca::TraceEntry &t)
{
	switch (t.action_) {
	case cca::TraceEntry::ALLOC:
		return MEMTAP_TORCH_ALLOC;
	case cca::TraceEntry::FREE_COMPLETED:
		return MEMTAP_TORCH_FREE;
	case cca::TraceEntry::SEGMENT_ALLOC:
		return MEMTAP_TORCH_SEGMENT_ALLOC;
	case cca::TraceEntry::SEGMENT_FREE:
		return MEMTAP_TORCH_SEGMENT_FREE;
	case cca::TraceEntry::SEGMENT_MAP:
		return MEMTAP_TORCH_SEGMENT_MAP;
	case cca::TraceEntry::SEGMENT_UNMAP:
		return MEMTAP_TORCH_SEGMENT_UNMAP;
	case cca::TraceEntry::OOM:
		return MEMTAP_TORCH_OOM;
	default: // FREE_REQUESTED (the block waits for its streams), SNAPSHOT, later additions
		return 0;
	}
}

// `allocator` is c10::cuda::CUDACachingAllocator::allocator, an std::atomic<CUDAAllocator*>.
extern "C" __attribute__((visibility("default"))) int memtap_torch_attach(void *allocator, memtap_torch_fn fn)
{
	try {
		cca::CUDAAllocator *a = static_cast<std::atomic<cca::CUDAAllocator *> *>(allocator)->load();
		if (!a || !a->initialized())
			return MEMTAP_TORCH_NOT_YET; // attached before init, a tracker would be lost
		a->attachAllocatorTraceTracker([fn](const cca::TraceEntry &t) {
			struct memtap_torch_entry e = {action_of(t), (int)t.device_, (uint64_t)t.addr_,
						       (uint64_t)t.size_, (uint64_t)(uintptr_t)t.stream_};
			if (e.action)
				fn(&e);
		});
		return MEMTAP_TORCH_ATTACHED;
	} catch (...) { // the cudaMallocAsync backend and the pluggable allocator have no tracker
		return MEMTAP_TORCH_REFUSED;
	}
}
