/* NVML's public types (nvml.h), as NVIDIA's libnvidia-ml.so.1 exports its entry points:
 * what tools/memtap/gpus.c calls, and the tests' stand-in (tests/analyze/fake_nvml.c)
 * provides. */
#ifndef MT_NVML_H
#define MT_NVML_H

typedef struct nvml_device *nvml_device;

struct nvml_memory {
	unsigned long long total, free, used;
};

/* nvmlProcessInfo_t, as nvmlDeviceGetComputeRunningProcesses_v3 fills it */
struct nvml_process {
	unsigned int pid;
	unsigned long long used;
	unsigned int gpu_instance, compute_instance;
};

enum { NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_INSUFFICIENT_SIZE = 7 };

#endif
