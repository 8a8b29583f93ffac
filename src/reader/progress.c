#include "reader/progress.h"

mt_progress_fn mt_progress_hook;
