/* Programs for the recorder's tests, compiled against the real CUDA headers and run on
 * simgpu under memtap: `workload MODE`. Each allocation has a size that says which path
 * made it, so a test can check every path is recorded exactly once:
 *   runtime     every runtime allocation call           sizes 1000001.. (+ kind)
 *   driver      every driver allocation call (-lcuda)   sizes 2000003..
 *   procaddr    dlopen + dlsym + cuGetProcAddress(_v2)  sizes 3000001..
 *   entrypoint  cudaGetDriverEntryPointByVersion VMM    2 MiB and 4 MiB handles
 *   threads N   N threads allocating at once (WORKLOAD_BARRIER=1: all of them alive at
 *               once, each after its first allocation)
 *   fork        parent, forked child, parent again      sizes 5000001.. 5000003
 *   exec        allocates, then runs `workload runtime` by exec in a child
 *   signals     a timer signal whose handler records marks while hooks run
 *   forever     allocates and frees until killed
 *   api         tags, marks, a snapshot (path in argv[2])
 *   nvtx        allocations inside nested NVTX ranges
 *   oom         an allocation past the device's capacity
 *   ooms        one allocation past capacity through each path: cudaMalloc, cudaMallocAsync,
 *               cuMemAlloc, cuMemCreate; each outcome printed (a policy may retry)
 *   sleep MS    allocates, sleeps MS milliseconds, frees
 *   many        a long run of allocations from one call site
 *   paths       allocations whose stacks differ only in one frame, 2 to 9 frames above
 *               the call, from calls made alternately by two functions of one frame size
 *   exit N      exits with status N;  kill: ends itself with SIGKILL
 *   plugin LIB  dlopen()s LIB after start and calls its plugin_alloc
 *   lifetime    allocations made before main and after exit starts (see early/late below)
 *   abort       allocates, then abort()s
 *   fiber       allocates on 4 KiB ucontext fibers (a guard page below) and on a 4 KiB
 *               sigaltstack; prints the CUDA results and the bytes of each stack used
 *   nested N    a timer's handler allocates (runtime and driver) while the program runs
 *   devices     two devices (SIMGPU_DEVICES=2): 10 MB + 20 MB on device 0, 7 MB on
 *               device 1 from a second thread, the 20 MB freed; 10 MB left on device 0
 *               NVTX and memtap hooks; prints how many allocations the handler made
 *   execself N  N allocations, a failing exec, N more, then exec `workload many N`
 *   forkidle    allocates, then forks a child that never touches the GPU
 *   forkshare PATH  from a second thread, inside NVTX range "forkshare step": a mark
 *               "forkshare mark" and 18000001 bytes from one call site; a snapshot to
 *               PATH (every string and stack so far in the parent's file), then a fork:
 *               the parent allocates 18000002 bytes from that call site, the child
 *               18000012 from it (the parent's stack), then the mark again and 18000013
 *               from a site of its own; each frees its own */
#include <errno.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memtap.h"

#define NOINLINE __attribute__((noinline))
#define MiB (1ull << 20)

cudaError_t CUDARTAPI cudaMallocAsync_ptsz(void **, size_t, cudaStream_t);
cudaError_t CUDARTAPI cudaFreeAsync_ptsz(void *, cudaStream_t);
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);

static int failures;

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "workload: %s failed\n", what);
		failures++;
	}
}
#define CHECK_RT(call) check((call) == cudaSuccess, #call)
#define CHECK_DRV(call) check((call) == CUDA_SUCCESS, #call)

static NOINLINE void runtime_paths(void)
{
	void *p[10];
	size_t pitch;
	struct cudaPitchedPtr pp;
	cudaStream_t s;
	cudaMemPool_t pool;

	CHECK_RT(cudaStreamCreate(&s));
	CHECK_RT(cudaMalloc(&p[0], 1000001));
	CHECK_RT(cudaMallocPitch(&p[1], &pitch, 1000, 1000));		/* pitch 1024 -> 1024000 */
	CHECK_RT(cudaMalloc3D(&pp, (struct cudaExtent){1000, 10, 10})); /* 1024 * 100 = 102400 */
	CHECK_RT(cudaMallocManaged(&p[2], 1000003, cudaMemAttachGlobal));
	CHECK_RT(cudaMallocHost(&p[3], 1000004));
	CHECK_RT(cudaHostAlloc(&p[4], 1000005, cudaHostAllocPortable));
	CHECK_RT(cudaMallocAsync(&p[5], 1000006, s));
	CHECK_RT(cudaMallocAsync_ptsz(&p[6], 1000007, NULL));
	CHECK_RT(cudaDeviceGetDefaultMemPool(&pool, 0));
	CHECK_RT(cudaMallocFromPoolAsync(&p[7], 1000008, pool, s));
	CHECK_RT(cudaFree(p[0]));
	CHECK_RT(cudaFree(p[1]));
	CHECK_RT(cudaFree(pp.ptr));
	CHECK_RT(cudaFree(p[2]));
	CHECK_RT(cudaFreeHost(p[3]));
	CHECK_RT(cudaFreeHost(p[4]));
	CHECK_RT(cudaFreeAsync(p[5], s));
	CHECK_RT(cudaFreeAsync_ptsz(p[6], NULL));
	CHECK_RT(cudaFreeAsync(p[7], s));
	CHECK_RT(cudaStreamSynchronize(s));
	CHECK_RT(cudaStreamDestroy(s));
	check(cudaFree((void *)0x1234) != cudaSuccess, "freeing an unknown pointer fails");
	cudaGetLastError();
}

static void driver_context(void)
{
	CUcontext c;

	CHECK_DRV(cuInit(0));
	CHECK_DRV(cuDevicePrimaryCtxRetain(&c, 0));
	CHECK_DRV(cuCtxSetCurrent(c));
}

static NOINLINE void vmm_paths(PFN_cuMemCreate_v10020 create, PFN_cuMemRelease_v10020 release,
			       PFN_cuMemAddressReserve_v10020 reserve, PFN_cuMemAddressFree_v10020 addr_free,
			       PFN_cuMemMap_v10020 map, PFN_cuMemUnmap_v10020 unmap, PFN_cuMemSetAccess_v10020 access)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	CUmemAccessDesc desc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUmemGenericAllocationHandle a, b;
	CUdeviceptr va;

	CHECK_DRV(create(&a, 2 * MiB, &prop, 0));
	CHECK_DRV(reserve(&va, 8 * MiB, 0, 0, 0));
	CHECK_DRV(map(va, 2 * MiB, 0, a, 0));
	CHECK_DRV(release(a)); /* still mapped: the memory stays */
	CHECK_DRV(create(&b, 4 * MiB, &prop, 0));
	CHECK_DRV(map(va + 2 * MiB, 4 * MiB, 0, b, 0));
	CHECK_DRV(access(va, 6 * MiB, &desc, 1));
	CHECK_DRV(unmap(va, 2 * MiB));
	CHECK_DRV(unmap(va + 2 * MiB, 4 * MiB));
	CHECK_DRV(release(b));
	CHECK_DRV(addr_free(va, 8 * MiB));
}

static NOINLINE void driver_paths(void)
{
	CUdeviceptr d[8];
	void *h[2];
	size_t pitch;
	CUstream s;
	CUmemoryPool pool;
	CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
				.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};

	driver_context();
	CHECK_DRV(cuStreamCreate(&s, 0));
	CHECK_DRV(cuMemAlloc(&d[0], 2000003));
	CHECK_DRV(cuMemAllocPitch(&d[1], &pitch, 2000, 1000, 4)); /* 2048 * 1000 = 2048000 */
	CHECK_DRV(cuMemAllocManaged(&d[2], 2000005, CU_MEM_ATTACH_GLOBAL));
	CHECK_DRV(cuMemHostAlloc(&h[0], 2000006, 0));
	CHECK_DRV(cuMemAllocHost(&h[1], 2000007));
	CHECK_DRV(cuMemAllocAsync(&d[3], 2000008, s));
	CHECK_DRV(cuMemAllocAsync_ptsz(&d[4], 2000009, NULL));
	CHECK_DRV(cuMemPoolCreate(&pool, &props));
	CHECK_DRV(cuMemAllocFromPoolAsync(&d[5], 2000010, pool, s));
	CHECK_DRV(cuMemFree(d[0]));
	CHECK_DRV(cuMemFree(d[1]));
	CHECK_DRV(cuMemFree(d[2]));
	CHECK_DRV(cuMemFreeHost(h[0]));
	CHECK_DRV(cuMemFreeHost(h[1]));
	CHECK_DRV(cuMemFreeAsync(d[3], s));
	CHECK_DRV(cuMemFreeAsync_ptsz(d[4], NULL));
	CHECK_DRV(cuMemFreeAsync(d[5], s));
	CHECK_DRV(cuMemPoolTrimTo(pool, 0));
	CHECK_DRV(cuMemPoolDestroy(pool));
	CHECK_DRV(cuStreamDestroy(s));
	vmm_paths(cuMemCreate, cuMemRelease, cuMemAddressReserve, cuMemAddressFree, cuMemMap, cuMemUnmap,
		  cuMemSetAccess);
}

static NOINLINE void procaddr_paths(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	PFN_cuGetProcAddress_v12000 gpa2;
	PFN_cuGetProcAddress_v11030 gpa1 = NULL;
	PFN_cuMemAlloc_v3020 alloc_a = NULL, alloc_b = NULL;
	PFN_cuMemFree_v3020 free_ = NULL;
	PFN_cuMemAllocAsync_v11020 async = NULL, async_ptsz = NULL;
	PFN_cuMemFreeAsync_v11020 free_async = NULL;
	PFN_cuMemAlloc_v3020 direct;
	CUdriverProcAddressQueryResult st;
	CUdeviceptr d[6];

	check(lib != NULL, "dlopen libcuda.so.1");
	gpa2 = (PFN_cuGetProcAddress_v12000)dlsym(lib, "cuGetProcAddress_v2");
	check(gpa2 != NULL, "dlsym cuGetProcAddress_v2");
	driver_context();
	CHECK_DRV(gpa2("cuMemAlloc", (void **)&alloc_a, 3020, 0, &st));
	CHECK_DRV(gpa2("cuMemAlloc", (void **)&alloc_b, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
	CHECK_DRV(gpa2("cuMemFree", (void **)&free_, 12000, 0, &st));
	CHECK_DRV(gpa2("cuMemAllocAsync", (void **)&async, 11020, 0, &st));
	CHECK_DRV(
	    gpa2("cuMemAllocAsync", (void **)&async_ptsz, 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
	CHECK_DRV(gpa2("cuMemFreeAsync", (void **)&free_async, 11020, 0, &st));
	CHECK_DRV(gpa2("cuGetProcAddress", (void **)&gpa1, 11030, 0, &st));
	check(gpa2("cuMemAllocAsync", (void **)&direct, 11010, 0, &st) == CUDA_ERROR_NOT_FOUND,
	      "a version too old passes through");
	CHECK_DRV(alloc_a(&d[0], 3000001));
	CHECK_DRV(alloc_b(&d[1], 3000002));
	CHECK_DRV(async(&d[2], 3000003, NULL));
	CHECK_DRV(async_ptsz(&d[3], 3000004, NULL));
	/* through the v1 (four-argument) cuGetProcAddress the driver handed out */
	alloc_a = NULL;
	CHECK_DRV(gpa1("cuMemAlloc", (void **)&alloc_a, 11030, 0));
	CHECK_DRV(alloc_a(&d[4], 3000005));
	/* a plain dlsym of the exported name */
	direct = (PFN_cuMemAlloc_v3020)dlsym(lib, "cuMemAlloc_v2");
	CHECK_DRV(direct(&d[5], 3000006));
	for (int i = 0; i < 6; i++)
		CHECK_DRV(i == 2 || i == 3 ? free_async(d[i], NULL) : free_(d[i]));
}

static NOINLINE void entrypoint_paths(void)
{
	enum cudaDriverEntryPointQueryResult st;
	void *fn[7] = {0};
	static const char *const names[7] = {"cuMemCreate", "cuMemRelease", "cuMemAddressReserve", "cuMemAddressFree",
					     "cuMemMap",    "cuMemUnmap",   "cuMemSetAccess"};

	CHECK_RT(cudaSetDevice(0));
	for (int i = 0; i < 7; i++)
		CHECK_RT(cudaGetDriverEntryPointByVersion(names[i], &fn[i], 12000, cudaEnableDefault, &st));
	vmm_paths(fn[0], fn[1], fn[2], fn[3], fn[4], fn[5], fn[6]);
}

static int per_thread = 1000;
static pthread_barrier_t together;
static bool wait_together;

static NOINLINE void *thread_work(void *arg)
{
	void *p[8];
	(void)arg;
	for (int i = 0; i < per_thread; i++) {
		int k = i % 8;
		CHECK_RT(cudaMalloc(&p[k], 4096 + (size_t)k));
		if (i == 0 && wait_together)
			pthread_barrier_wait(&together);
		if (k == 7)
			for (int j = 0; j < 8; j++)
				CHECK_RT(cudaFree(p[j]));
	}
	return NULL;
}

static void threads(int n)
{
	pthread_t *t = calloc((size_t)n, sizeof *t);

	wait_together = getenv("WORKLOAD_BARRIER") != NULL;
	if (wait_together)
		pthread_barrier_init(&together, NULL, (unsigned)n);
	for (int i = 0; i < n; i++)
		pthread_create(&t[i], NULL, thread_work, NULL);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	free(t);
}

static NOINLINE void alloc_free(size_t size)
{
	void *p;
	CHECK_RT(cudaMalloc(&p, size));
	CHECK_RT(cudaFree(p));
}

/* Two callers of one chain: each allocation's slots are where the other's were, and only
 * the return address into via_a or via_b differs, `depth` + 2 frames above the call. */
static volatile int path_taken;
static NOINLINE void chain(int depth)
{
	if (depth)
		chain(depth - 1);
	else
		alloc_free(16000001);
	path_taken += depth; /* after the call: no tail call */
}

static NOINLINE void via_a(int depth)
{
	chain(depth);
	path_taken += 1; /* bodies that differ: the compiler cannot fold the two into one */
}

static NOINLINE void via_b(int depth)
{
	chain(depth);
	path_taken += 2;
}

static void paths(void)
{
	for (int depth = 0; depth < 8; depth++)
		for (int i = 0; i < 20; i++)
			(i % 2 ? via_a : via_b)(depth);
}

static void forking(void)
{
	pid_t pid;
	int status;

	alloc_free(5000001);
	pid = fork();
	if (pid == 0) {
		alloc_free(5000002);
		exit(failures ? 1 : 0);
	}
	waitpid(pid, &status, 0);
	check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "forked child");
	alloc_free(5000003);
}

static void exec_child(const char *self)
{
	pid_t pid;
	int status;

	alloc_free(6000001);
	pid = fork();
	if (pid == 0) {
		execl(self, self, "runtime", (char *)NULL);
		_exit(127);
	}
	waitpid(pid, &status, 0);
	check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exec'd child");
}

static volatile sig_atomic_t ticks;

/* "tick N" without stdio, which a signal handler may not use */
static void tick_name(char *buf, unsigned n)
{
	char digits[16];
	int k = 0;

	memcpy(buf, "tick ", 5);
	do
		digits[k++] = (char)('0' + n % 10);
	while ((n /= 10) && k < 15);
	for (int i = 0; i < k; i++)
		buf[5 + i] = digits[k - 1 - i];
	buf[5 + k] = '\0';
}

static void on_tick(int sig)
{
	char name[32];

	(void)sig;
	tick_name(name, (unsigned)++ticks);
	/* records from inside a signal handler, maybe in the middle of a hook or of interning
	   a new name: every name is new, so the handler interns too */
	memtap_mark(name);
}

static void signals(void)
{
	struct itimerval it = {{0, 20}, {0, 20}};
	struct sigaction sa = {.sa_handler = on_tick, .sa_flags = SA_RESTART};

	/* resolve the API and load NVTX's injection before signals arrive: a handler's first
	   memtap_mark looks memtap up with dlsym, which waits for the loader's lock that the
	   interrupted code may hold (NVTX's first push runs dlopen) */
	memtap_mark("before ticks");
	nvtxRangePushA("before ticks");
	nvtxRangePop();
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
	for (int i = 0; i < 20000; i++) {
		char range[32];
		snprintf(range, sizeof range, "step %d", i); /* a new name each time: interning while ticks land */
		nvtxRangePushA(range);
		alloc_free(7000001);
		nvtxRangePop();
		for (volatile int spin = 0; spin < 2000; spin++) /* time outside hooks, for ticks to land in */
			;
	}
	it = (struct itimerval){{0, 0}, {0, 0}};
	setitimer(ITIMER_REAL, &it, NULL);
	check(ticks > 0, "timer ticks arrived");
}

static void forever(void)
{
	for (unsigned long i = 0;; i++) {
		nvtxRangePushA("step");
		alloc_free(8000001);
		nvtxRangePop();
		if (i % 1000 == 0)
			usleep(1000);
	}
}

static NOINLINE void api(const char *snapshot)
{
	void *p, *q, *keep;

	check(memtap_active() == 1, "memtap_active");
	check(memtap_tag_push(MEMTAP_PARAMS) == 0, "memtap_tag_push");
	CHECK_RT(cudaMalloc(&p, 9000001));
	check(memtap_tag_pop() == 0, "memtap_tag_pop");
	CHECK_RT(cudaMalloc(&q, 9000002));
	check(memtap_tag_range(q, 9000002, MEMTAP_ACTIVATIONS) == 0, "memtap_tag_range");
	check(memtap_tag_push(99) == EINVAL, "a bad category is refused");
	check(memtap_mark("iteration") == 0, "memtap_mark");
	CHECK_RT(cudaMalloc(&keep, 9000003));
	check(memtap_snapshot(snapshot) == 0, "memtap_snapshot");
	CHECK_RT(cudaFree(p));
	CHECK_RT(cudaFree(q));
	CHECK_RT(cudaFree(keep));
}

static NOINLINE void nvtx(void)
{
	void *p[3];

	nvtxRangePushA("forward");
	CHECK_RT(cudaMalloc(&p[0], 10000001));
	nvtxRangePushA("layer.0");
	CHECK_RT(cudaMalloc(&p[1], 10000002));
	nvtxRangePop();
	nvtxRangePop();
	nvtxRangeId_t r = nvtxRangeStartA("optimizer");
	CHECK_RT(cudaMalloc(&p[2], 10000003));
	nvtxRangeEnd(r);
	nvtxMarkA("done");
	for (int i = 0; i < 3; i++)
		CHECK_RT(cudaFree(p[i]));
}

static NOINLINE void oom(void)
{
	void *p;
	size_t f, t;

	CHECK_RT(cudaMemGetInfo(&f, &t));
	check(cudaMalloc(&p, t + 1) == cudaErrorMemoryAllocation, "an allocation past capacity fails");
	cudaGetLastError();
}

static NOINLINE void ooms(void)
{
	PFN_cuMemAlloc_v3020 mem_alloc;
	PFN_cuMemCreate_v10020 create;
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
	CUmemGenericAllocationHandle h;
	CUdeviceptr d;
	cudaStream_t s;
	void *p;
	size_t f, t;

	CHECK_RT(cudaMemGetInfo(&f, &t));
	CHECK_RT(cudaStreamCreate(&s));
	CHECK_RT(cudaGetDriverEntryPointByVersion("cuMemAlloc", (void **)&mem_alloc, 3020, cudaEnableDefault, NULL));
	CHECK_RT(cudaGetDriverEntryPointByVersion("cuMemCreate", (void **)&create, 10020, cudaEnableDefault, NULL));
	printf("cudaMalloc %d\n", (int)cudaMalloc(&p, t + 1));
	printf("cudaGetLastError %d\n", (int)cudaGetLastError());
	printf("cudaMallocAsync %d\n", (int)cudaMallocAsync(&p, t + 2, s));
	cudaGetLastError();
	printf("cuMemAlloc %d\n", (int)mem_alloc(&d, t + 3));
	printf("cuMemCreate %d\n", (int)create(&h, ((t >> 21) + 1) << 21, &prop, 0));
	CHECK_RT(cudaMalloc(&p, 1 << 20));
	CHECK_RT(cudaFree(p));
}

static NOINLINE void sleep_ms(long ms)
{
	void *p;

	CHECK_RT(cudaMalloc(&p, 12000001));
	usleep((useconds_t)ms * 1000);
	CHECK_RT(cudaFree(p));
}

static NOINLINE void many(long n)
{
	for (long i = 0; i < n; i++)
		alloc_free(11000001);
}

/* ---- small stacks: the hooks' own stack use, measured as the bytes of a patterned
 * stack that were written ---- */
#define SMALL (4u << 10)
#define PATTERN 0xa5

static char *small_stack(void)
{
	char *m = mmap(NULL, 4096 + SMALL, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		return NULL;
	mprotect(m, 4096, PROT_NONE); /* an overflow faults instead of going unnoticed */
	return m + 4096;
}

static size_t used(const char *stack)
{
	size_t k = 0;

	while (k < SMALL && (unsigned char)stack[k] == PATTERN)
		k++;
	return SMALL - k;
}

static ucontext_t fiber_back, fiber_uc;
static int fiber_malloc, fiber_free;

static NOINLINE void fiber_body(void)
{
	void *p = NULL;

	fiber_malloc = cudaMalloc(&p, 14000001);
	fiber_free = cudaFree(p);
}

static size_t on_fiber(char *stack)
{
	memset(stack, PATTERN, SMALL);
	getcontext(&fiber_uc);
	fiber_uc.uc_stack.ss_sp = stack;
	fiber_uc.uc_stack.ss_size = SMALL;
	fiber_uc.uc_link = &fiber_back;
	makecontext(&fiber_uc, fiber_body, 0);
	swapcontext(&fiber_back, &fiber_uc);
	return used(stack);
}

static void on_signal_stack(int sig)
{
	(void)sig;
	fiber_body();
}

/* In a new thread, so that its first event is made on the fiber. */
static void *fibers(void *arg)
{
	char *stack = arg;
	size_t first = on_fiber(stack);
	int m1 = fiber_malloc, f1 = fiber_free;
	size_t later = on_fiber(stack);

	printf("fiber first %zu later %zu results %d %d %d %d\n", first, later, m1, f1, fiber_malloc, fiber_free);
	return NULL;
}

static void small_stacks(void)
{
	char *stack = small_stack(), *alt = small_stack();
	pthread_t t;
	stack_t ss = {.ss_sp = alt, .ss_size = SMALL};
	struct sigaction sa = {.sa_handler = on_signal_stack, .sa_flags = SA_ONSTACK};

	check(stack && alt, "mapping small stacks");
	CHECK_RT(cudaFree(NULL)); /* the runtime starts on the main stack: it needs more than 4 KiB */
	pthread_create(&t, NULL, fibers, stack);
	pthread_join(t, NULL);
	/* a signal handler on a 4 KiB alternate stack; the kernel's signal frame takes part */
	memset(alt, PATTERN, SMALL);
	sigaltstack(&ss, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	raise(SIGUSR1);
	printf("sigaltstack %zu results %d %d\n", used(alt), fiber_malloc, fiber_free);
}

/* ---- a signal handler allocating while the program is inside memtap's hooks ---- */
static volatile sig_atomic_t handler_allocs;
static PFN_cuMemAlloc_v3020 nested_alloc;
static PFN_cuMemFree_v3020 nested_free;

static void allocate_in_handler(int sig)
{
	void *p;
	CUdeviceptr d;

	(void)sig;
	if (cudaMalloc(&p, 15000001) == cudaSuccess && cudaFree(p) == cudaSuccess)
		handler_allocs++;
	if (nested_alloc(&d, 15000002) == CUDA_SUCCESS && nested_free(d) == CUDA_SUCCESS)
		handler_allocs++;
}

static void nested(long n)
{
	/* every 200 us: a handler that interrupts a new stack unwinds it the slow way (tens of us) */
	struct itimerval it = {{0, 200}, {0, 200}};
	struct sigaction sa = {.sa_handler = allocate_in_handler, .sa_flags = SA_RESTART};
	void *p;

	alloc_free(15000000); /* the runtime and the driver start before the first signal */
	CHECK_RT(cudaGetDriverEntryPointByVersion("cuMemAlloc", (void **)&nested_alloc, 3020, cudaEnableDefault, NULL));
	CHECK_RT(cudaGetDriverEntryPointByVersion("cuMemFree", (void **)&nested_free, 3020, cudaEnableDefault, NULL));
	CHECK_RT(cudaMalloc(&p, 1));
	CHECK_RT(cudaFree(p));
	memtap_active();
	/* the handler's own calls once before the first signal: their first lookups (a dlopen
	 * of the driver, which is not async-signal-safe under ThreadSanitizer) are done */
	allocate_in_handler(0);
	handler_allocs = 0;
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
	for (long i = 0; i < n;
	     i++) { /* hooks that never enter the simulated GPU, whose lock a handler would wait on */
		nvtxRangePushA("step");
		memtap_mark("iteration");
		nvtxRangePop();
	}
	it = (struct itimerval){{0, 0}, {0, 0}};
	setitimer(ITIMER_REAL, &it, NULL);
	printf("handler allocations %d\n", (int)handler_allocs);
}

/* ---- two devices ---- */
static void *on_device_1(void *arg)
{
	void *p;

	(void)arg;
	CHECK_RT(cudaSetDevice(1));
	CHECK_RT(cudaMalloc(&p, 7000000));
	CHECK_RT(cudaFree(p));
	return NULL;
}

static void devices(void)
{
	void *a, *b;
	pthread_t t;

	CHECK_RT(cudaSetDevice(0));
	CHECK_RT(cudaMalloc(&a, 10000000));
	CHECK_RT(cudaMalloc(&b, 20000000));
	pthread_create(&t, NULL, on_device_1, NULL);
	pthread_join(t, NULL);
	CHECK_RT(cudaFree(b));
}

/* ---- exec of the process itself ---- */
static void exec_self(const char *self, long n)
{
	char count[32];

	for (long i = 0; i < n; i++)
		alloc_free(16000001);
	errno = 0;
	execl("/nonexistent/memtap-workload", "nope", (char *)NULL);
	check(errno == ENOENT, "a failing exec returns");
	for (long i = 0; i < n; i++)
		alloc_free(16000002);
	snprintf(count, sizeof count, "%ld", n);
	execl(self, self, "many", count, (char *)NULL);
	check(0, "exec of the workload");
}

static void fork_idle(void)
{
	pid_t pid;
	int status;

	alloc_free(17000001);
	pid = fork();
	if (pid == 0) { /* never touches the GPU; nothing made a thread inside fork() */
		int threads = 0;
		DIR *d = opendir("/proc/self/task");
		for (struct dirent *e; d && (e = readdir(d)) != NULL;)
			threads += e->d_name[0] != '.';
		if (d)
			closedir(d);
		exit(threads == 1 ? 0 : 3);
	}
	waitpid(pid, &status, 0);
	check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "idle child, with one thread after fork");
}

static NOINLINE void shared_site(size_t size, void **p)
{
	CHECK_RT(cudaMalloc(p, size));
}

static NOINLINE void child_site(size_t size, void **p)
{
	CHECK_RT(cudaMalloc(p, size));
	check(memtap_active() == 1, "memtap records the child"); /* not folded into shared_site */
}

static NOINLINE void *fork_share(void *path)
{
	void *p[3] = {0};
	pid_t pid = -1;
	int status;

	nvtxRangePushA("forkshare step");
	memtap_mark("forkshare mark");
	for (int i = 0; i < 2; i++) {
		if (i == 1) {
			check(memtap_snapshot(path) == 0, "the snapshot before the fork");
			pid = fork();
		}
		shared_site(pid == 0 ? 18000012 : 18000001 + (size_t)i, &p[i]); /* one call site */
	}
	if (pid == 0) {
		memtap_mark("forkshare mark");
		child_site(18000013, &p[2]);
		for (int i = 1; i < 3; i++)
			CHECK_RT(cudaFree(p[i]));
		nvtxRangePop();
		exit(failures ? 1 : 0);
	}
	waitpid(pid, &status, 0);
	check(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "the forked child");
	for (int i = 0; i < 2; i++)
		CHECK_RT(cudaFree(p[i]));
	nvtxRangePop();
	return NULL;
}

static void forkshare(const char *path)
{
	pthread_t t;

	pthread_create(&t, NULL, fork_share, (void *)path);
	pthread_join(t, NULL);
}

static void *early;

/* Before main: a constructor's allocation, kept until an atexit handler frees it. */
__attribute__((constructor)) static void before_main(void)
{
	const char *mode = getenv("WORKLOAD_LIFETIME");
	if (mode && cudaMalloc(&early, 12000007) != cudaSuccess)
		early = NULL;
}

static void after_main(void)
{
	void *late;
	cudaFree(early);
	if (cudaMalloc(&late, 12000008) == cudaSuccess) /* made after exit began, never freed */
		early = late;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	if (!strcmp(mode, "runtime"))
		runtime_paths();
	else if (!strcmp(mode, "driver"))
		driver_paths();
	else if (!strcmp(mode, "procaddr"))
		procaddr_paths();
	else if (!strcmp(mode, "entrypoint"))
		entrypoint_paths();
	else if (!strcmp(mode, "threads"))
		threads(argc > 2 ? atoi(argv[2]) : 64);
	else if (!strcmp(mode, "fork"))
		forking();
	else if (!strcmp(mode, "exec"))
		exec_child(argv[0]);
	else if (!strcmp(mode, "signals"))
		signals();
	else if (!strcmp(mode, "forever"))
		forever();
	else if (!strcmp(mode, "api") && argc > 2)
		api(argv[2]);
	else if (!strcmp(mode, "nvtx"))
		nvtx();
	else if (!strcmp(mode, "oom"))
		oom();
	else if (!strcmp(mode, "ooms"))
		ooms();
	else if (!strcmp(mode, "sleep") && argc > 2)
		sleep_ms(atol(argv[2]));
	else if (!strcmp(mode, "paths"))
		paths();
	else if (!strcmp(mode, "many"))
		many(argc > 2 ? atol(argv[2]) : 100000);
	else if (!strcmp(mode, "plugin") && argc > 2) {
		void *lib = dlopen(argv[2], RTLD_NOW);
		void (*plugin_alloc)(void) = lib ? (void (*)(void))dlsym(lib, "plugin_alloc") : NULL;
		check(plugin_alloc != NULL, "loading the plugin");
		if (plugin_alloc)
			plugin_alloc();
	} else if (!strcmp(mode, "lifetime")) {
		check(early != NULL, "an allocation before main");
		atexit(after_main);
	} else if (!strcmp(mode, "abort")) {
		alloc_free(12000009);
		abort();
	} else if (!strcmp(mode, "exit") && argc > 2)
		return atoi(argv[2]);
	else if (!strcmp(mode, "kill"))
		raise(SIGKILL);
	else if (!strcmp(mode, "fiber"))
		small_stacks();
	else if (!strcmp(mode, "nested"))
		nested(argc > 2 ? atol(argv[2]) : 200000);
	else if (!strcmp(mode, "devices"))
		devices();
	else if (!strcmp(mode, "execself"))
		exec_self(argv[0], argc > 2 ? atol(argv[2]) : 100);
	else if (!strcmp(mode, "forkidle"))
		fork_idle();
	else if (!strcmp(mode, "forkshare") && argc > 2)
		forkshare(argv[2]);
	else {
		fprintf(stderr, "usage: workload MODE (see the comment at the top of workload.c)\n");
		return 2;
	}
	return failures ? 1 : 0;
}
