/* simgpu's runtime: what its files share. The driver functions it fetched, one slot per
 * row of runtime_driver.def (name, version, flags), called through DRV/DRV_PT with the
 * typedef of the ABI asked; a slot the driver did not fill returns NOT_SUPPORTED. */
#ifndef RUNTIME_H
#define RUNTIME_H

#include <cuda.h>
#include <cudaProfilerTypedefs.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

enum rt_drv_slot {
#define RT_DRV(name, version, flags) RT_DRV_##name##_##version##_##flags,
#include "runtime_driver.def"
#undef RT_DRV
	RT_NDRV
};

extern void *rt_drv[RT_NDRV];

#define DRV(name, version) ((PFN_##name##_v##version)rt_drv[RT_DRV_##name##_##version##_0])
/* the per-thread-default-stream twin fetched at ptver, which has the ABI of version */
#define DRV_PT(name, ptver, version) ((PFN_##name##_v##version)rt_drv[RT_DRV_##name##_##ptver##_2])

#endif
