/* InitializeInjection: called by the driver during cuInit when CUDA_INJECTION64_PATH
 * names this library. Subscribes to CUPTI and enables the memory callbacks; if CUPTI
 * refuses (another subscriber, no device) it says so in one line and records nothing,
 * and the job runs on unchanged. */
#include "cupti/cupti_backend.h"

MTP_EXPORT int InitializeInjection(void)
{
	static CUpti_SubscriberHandle sub;
	const char *why = NULL;
	CUptiResult r;

	if (mtp_state_now() != MTP_ON)
		return 0;
	r = cuptiSubscribe(&sub, (CUpti_CallbackFunc)mtp_cupti_callback, NULL);
	if (r != CUPTI_SUCCESS) {
		cuptiGetResultString(r, &why);
		mtp_warn("the CUPTI backend cannot subscribe (%s): nothing is recorded; another CUPTI client "
			 "(Nsight, torch.profiler) may be attached, or use the default backend",
			 why ? why : "unknown error");
		return 0;
	}
	for (size_t i = 0; i < mtp_cupti_nids; i++) {
		r = cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, mtp_cupti_ids[i]);
		if (r != CUPTI_SUCCESS) {
			cuptiGetResultString(r, &why);
			mtp_warn("the CUPTI backend cannot enable callback %u (%s)", mtp_cupti_ids[i], why ? why : "?");
		}
	}
	return 1;
}
