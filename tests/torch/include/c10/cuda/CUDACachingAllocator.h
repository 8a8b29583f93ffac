// A stand-in for PyTorch's c10/cuda/CUDACachingAllocator.h, written for memtap's tests: it
// declares only what src/recorder/torch_tracker.cc uses, with the names and types of the
// release STANDIN_TORCH says (major * 100 + minor; the test writes standin_version.h):
//   2.2-2.8  TraceEntry {action_, device_, int64_t addr_, context_, stream_, int64_t size_, ...}
//   2.9-     addr_ and size_ size_t, and strings after them (compile_context_, user_metadata_)
// Action's enumerators in their order since 2.1 (SEGMENT_MAP and SEGMENT_UNMAP came then).
// The allocator's other methods and their order are not torch's: nothing here reaches them
// by slot, only through this header.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "c10/standin_version.h"

typedef struct CUstream_st *cudaStream_t;

namespace c10
{
using DeviceIndex = int8_t;
namespace cuda
{
namespace CUDACachingAllocator
{

#if STANDIN_TORCH >= 209
using trace_size_t = size_t;
#else
using trace_size_t = int64_t;
#endif

struct TraceEntry {
	enum Action {
		ALLOC,
		FREE_REQUESTED,
		FREE_COMPLETED,
		SEGMENT_ALLOC,
		SEGMENT_FREE,
		SEGMENT_MAP,
		SEGMENT_UNMAP,
		SNAPSHOT,
		OOM
	};
	TraceEntry(Action action, DeviceIndex device, trace_size_t addr, trace_size_t size, cudaStream_t stream)
	    : action_(action), device_(device), addr_(addr), stream_(stream), size_(size)
	{
	}
	Action action_;
	DeviceIndex device_;
	trace_size_t addr_;
	std::shared_ptr<void> context_;
	cudaStream_t stream_;
	trace_size_t size_;
	uint64_t time_ = 0;
#if STANDIN_TORCH >= 209
	std::string compile_context_ = "N/A";
	std::string user_metadata_;
#endif
};

using AllocatorTraceTracker = std::function<void(const TraceEntry &)>;

class CUDAAllocator
{
      public:
	virtual ~CUDAAllocator() = default;
	virtual void init(int device_count) = 0;
	virtual bool initialized() = 0;
	virtual void *raw_alloc(size_t nbytes) = 0;
	virtual void raw_delete(void *ptr) = 0;
	virtual void emptyCache() = 0;
#if STANDIN_TORCH >= 202
	virtual void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) = 0;
#endif
};

extern std::atomic<CUDAAllocator *> allocator;

inline CUDAAllocator *get()
{
	return allocator.load();
}

} // namespace CUDACachingAllocator
} // namespace cuda
} // namespace c10
