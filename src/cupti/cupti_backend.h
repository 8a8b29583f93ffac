/* The CUPTI backend's callback and the callback ids it subscribes to (cupti.c), and
 * its entry point for the driver (inject.c). */
#ifndef MTP_CUPTI_BACKEND_H
#define MTP_CUPTI_BACKEND_H

#include <cupti.h>
#include <stddef.h>

#include "recorder/mtp.h"

MTP_HIDDEN void CUPTIAPI mtp_cupti_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
					    const void *data);
extern MTP_HIDDEN const CUpti_CallbackId mtp_cupti_ids[];
extern MTP_HIDDEN const size_t mtp_cupti_nids;

#endif
