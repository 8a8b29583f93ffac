/* simgpu's runtime: what its files share. The driver functions it fetched, one slot per
 * row of runtime_driver.def (name, version, flags), called through DRV/DRV_PT with the
 * typedef of the ABI asked; a slot the driver did not fill returns NOT_SUPPORTED. */
#ifndef RUNTIME_H
#define RUNTIME_H

#include <cuda.h>
#include <cudaProfilerTypedefs.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>

enum rt_drv_slot {
#define RT_DRV(name, version, flags) RT_DRV_##name##_##version##_##flags,
#include "runtime_driver.def"
#undef RT_DRV
	RT_NDRV
};

extern void *rt_drv[RT_NDRV];

#define DRV(name, version) ((PFN_##name##_v##version)rt_drv[RT_DRV_##name##_##version##_0])
/* the slot fetched at version, whose typedef carries another version's name (same ABI) */
#define DRV_AS(name, version, abi) ((PFN_##name##_v##abi)rt_drv[RT_DRV_##name##_##version##_0])
/* the per-thread-default-stream twin fetched at ptver, which has the ABI of version */
#define DRV_PT(name, ptver, version) ((PFN_##name##_v##version)rt_drv[RT_DRV_##name##_##ptver##_2])

/* runtime.c: the error the call returns, kept as the thread's last error when not success */
cudaError_t rt_note(cudaError_t e);
cudaError_t rt_result(CUresult r); /* the runtime's code for the driver's, noted */
/* Loads the driver once, then makes the thread's device's primary context current. */
cudaError_t rt_ready(void);
int rt_device(void);				 /* the thread's current device */
cudaError_t rt_primary(int dev, CUcontext *out); /* the device's primary context, retained once */
int rt_device_count(void);			 /* after rt_ready */

#define READY()                                                                                                        \
	do {                                                                                                           \
		cudaError_t e_ = rt_ready();                                                                           \
		if (e_ != cudaSuccess)                                                                                 \
			return e_;                                                                                     \
	} while (0)

/* runtime_copy.c: a runtime 3D copy (pitched pointers only) as the driver's */
cudaError_t rt_copy3d(const struct cudaMemcpy3DParms *p, CUDA_MEMCPY3D *c);

/* runtime_module.c: the driver's function for a kernel nvcc registered (by its host stub), on the
 * current device */
cudaError_t rt_function(const void *hostFun, CUfunction *out);

#endif
