/* A stand-in for NVIDIA's NVML (libnvidia-ml.so.1) for `memtap top` with no argument:
 * one GPU, "Test GPU", of FAKE_NVML_TOTAL bytes (80 GiB), FAKE_NVML_USED of them used, and
 * the processes FAKE_NVML_PROCS lists ("PID:BYTES PID:BYTES ..."). The entry points and
 * types are NVML's public ones (nvml.h), as tools/memtap/gpus.c calls them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvml.h"

static unsigned long long number(const char *name, unsigned long long def)
{
	const char *v = getenv(name);

	return v ? strtoull(v, NULL, 10) : def;
}

int nvmlInit_v2(void)
{
	return 0;
}

int nvmlShutdown(void)
{
	return 0;
}

int nvmlDeviceGetCount_v2(unsigned *n)
{
	*n = 1;
	return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned i, nvml_device *d)
{
	*d = (nvml_device)(unsigned long)(i + 1);
	return i == 0 ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

int nvmlDeviceGetName(nvml_device d, char *name, unsigned n)
{
	(void)d;
	snprintf(name, n, "Test GPU");
	return 0;
}

int nvmlDeviceGetMemoryInfo(nvml_device d, struct nvml_memory *m)
{
	(void)d;
	m->total = number("FAKE_NVML_TOTAL", 80ull << 30);
	m->used = number("FAKE_NVML_USED", 0);
	m->free = m->total - m->used;
	return 0;
}

int nvmlDeviceGetComputeRunningProcesses_v3(nvml_device d, unsigned *n, struct nvml_process *p)
{
	const char *list = getenv("FAKE_NVML_PROCS");
	unsigned k = 0;

	(void)d;
	for (const char *s = list; s && *s && k < *n;) {
		char *end;
		p[k].pid = (unsigned)strtoul(s, &end, 10);
		if (*end != ':')
			break;
		p[k].used = strtoull(end + 1, &end, 10);
		p[k].gpu_instance = p[k].compute_instance = 0xFFFFFFFFu;
		k++;
		s = end + strspn(end, " ");
	}
	*n = k;
	return 0;
}
