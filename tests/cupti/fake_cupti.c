/* A stand-in libcupti.so.13 for testing memtap's CUPTI backend without a GPU: it keeps
 * the subscriber's callback and the ids enabled, and lets a test fire the callback with
 * data built from CUPTI's own header structures (fake_cupti_fire). */
#include <cupti.h>
#include <stdint.h>

static CUpti_CallbackFunc callback;
static void *callback_data;
static unsigned char enabled[CUPTI_DRIVER_TRACE_CBID_SIZE];

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc fn, void *userdata)
{
	if (callback)
		return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
	callback = fn;
	callback_data = userdata;
	*subscriber = (CUpti_SubscriberHandle)&callback;
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
					 CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
{
	(void)subscriber;
	if (domain != CUPTI_CB_DOMAIN_DRIVER_API || cbid >= CUPTI_DRIVER_TRACE_CBID_SIZE)
		return CUPTI_ERROR_INVALID_PARAMETER;
	enabled[cbid] = enable != 0;
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char **str)
{
	*str = result == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "CUPTI_ERROR (fake)";
	return CUPTI_SUCCESS;
}

int fake_cupti_enabled(CUpti_CallbackId cbid)
{
	return cbid < CUPTI_DRIVER_TRACE_CBID_SIZE && enabled[cbid];
}

/* What the real CUPTI does around a driver call: enter, (the call), exit. */
void fake_cupti_fire(CUpti_CallbackId cbid, const char *name, void *params, CUresult result)
{
	uint64_t correlation = 0; /* the callback's own word from enter to exit, as CUPTI keeps one */
	CUpti_CallbackData d = {.callbackSite = CUPTI_API_ENTER,
				.functionName = name,
				.functionParams = params,
				.functionReturnValue = &result,
				.correlationData = &correlation};

	if (!callback || !fake_cupti_enabled(cbid))
		return;
	callback(callback_data, CUPTI_CB_DOMAIN_DRIVER_API, cbid, &d);
	d.callbackSite = CUPTI_API_EXIT;
	callback(callback_data, CUPTI_CB_DOMAIN_DRIVER_API, cbid, &d);
}
