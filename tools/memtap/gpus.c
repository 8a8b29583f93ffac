/* The machine's GPUs as the driver counts them, for `memtap top` with no argument: NVML
 * (libnvidia-ml.so.1, NVIDIA's public management library, found at run time; MEMTAP_NVML
 * names another file) gives each device's name, used and total memory and the processes
 * using it, with what each holds where the driver says (not for another user's processes
 * without root, on some drivers). Nothing here is needed to follow a trace. */
#include "gpus.h"
#include "nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mt_gpus_read(struct mt_gpus *out)
{
	const char *path = getenv("MEMTAP_NVML") ? getenv("MEMTAP_NVML") : "libnvidia-ml.so.1";
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	int (*init)(void), (*shutdown)(void), (*count)(unsigned *), (*handle)(unsigned, nvml_device *);
	int (*name)(nvml_device, char *, unsigned), (*memory)(nvml_device, struct nvml_memory *);
	int (*procs)(nvml_device, unsigned *, struct nvml_process *);
	unsigned n = 0;

	memset(out, 0, sizeof *out);
	if (!lib) {
		snprintf(out->why, sizeof out->why, "no NVIDIA driver's NVML here (%s)", path);
		return -1;
	}
	*(void **)&init = dlsym(lib, "nvmlInit_v2");
	*(void **)&shutdown = dlsym(lib, "nvmlShutdown");
	*(void **)&count = dlsym(lib, "nvmlDeviceGetCount_v2");
	*(void **)&handle = dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
	*(void **)&name = dlsym(lib, "nvmlDeviceGetName");
	*(void **)&memory = dlsym(lib, "nvmlDeviceGetMemoryInfo");
	*(void **)&procs = dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
	if (!init || !shutdown || !count || !handle || !name || !memory) {
		snprintf(out->why, sizeof out->why, "%s lacks NVML's entry points", path);
		dlclose(lib);
		return -1;
	}
	if (init() != NVML_SUCCESS) {
		snprintf(out->why, sizeof out->why, "NVML (%s) did not start: no driver loaded, or no GPU", path);
		dlclose(lib);
		return -1;
	}
	if (count(&n) != NVML_SUCCESS)
		n = 0;
	for (unsigned i = 0; i < n && out->n < MT_GPUS; i++) {
		struct mt_gpu *g = &out->gpu[out->n];
		struct nvml_process p[MT_GPU_PROCS];
		struct nvml_memory m;
		unsigned k = MT_GPU_PROCS;
		nvml_device d;
		if (handle(i, &d) != NVML_SUCCESS || memory(d, &m) != NVML_SUCCESS)
			continue;
		if (name(d, g->name, sizeof g->name) != NVML_SUCCESS)
			snprintf(g->name, sizeof g->name, "GPU %u", i);
		g->index = (int)i, g->total = m.total, g->used = m.used;
		/* too many to list: as many as fit (a second call would race new ones anyway) */
		g->procs_known = procs && (procs(d, &k, p) == NVML_SUCCESS);
		for (unsigned j = 0; g->procs_known && j < k && j < MT_GPU_PROCS; j++)
			g->proc[g->nprocs++] = (struct mt_gpu_proc){(long)p[j].pid, p[j].used};
		out->n++;
	}
	shutdown();
	dlclose(lib);
	return 0;
}
