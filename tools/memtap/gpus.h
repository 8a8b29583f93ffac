/* The machine's GPUs as the driver counts them (tools/memtap/gpus.c) */
#ifndef MT_GPUS_H
#define MT_GPUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MT_GPUS 64
#define MT_GPU_PROCS 64

struct mt_gpu_proc {
	long pid;
	uint64_t used; /* what the driver says it holds; 0: not said */
};

struct mt_gpu {
	int index;
	char name[96];
	uint64_t total, used;
	bool procs_known; /* the driver listed its processes */
	struct mt_gpu_proc proc[MT_GPU_PROCS];
	size_t nprocs;
};

struct mt_gpus {
	struct mt_gpu gpu[MT_GPUS];
	size_t n;
	char why[256]; /* why none are known */
};

/* 0, or -1 with out->why saying why the driver could not be asked */
int mt_gpus_read(struct mt_gpus *out);

#endif
