/* Exports for other tools: folded stacks (flamegraph.pl, speedscope), Chrome
 * trace-event JSON (ui.perfetto.dev, chrome://tracing) and PyTorch's memory_viz. */
#ifndef MT_EXPORT_H
#define MT_EXPORT_H

#include <stdio.h>

#include "analyze/report.h"

enum mt_folded_what { MT_FOLDED_PEAK, MT_FOLDED_EXIT, MT_FOLDED_LEAKS };

/* "outermost;...;innermost bytes" per stack: live at the peaks, live at exit, or leak growth;
 * frames as the report reads them (function (file:line), the plumbing left out). 0 or errno. */
int mt_export_folded(FILE *out, const struct mt_report *r, struct mt_symbols *sym, enum mt_folded_what what);
/* A counter track per device split by category, OOMs as instant events, NVTX ranges as slices. */
int mt_export_perfetto(FILE *out, const struct mt_report *r);
/* A pickle in PyTorch's snapshot layout for pytorch.org/memory_viz (memviz.c). */
int mt_export_memviz(FILE *out, const struct mt_report *r, struct mt_symbols *sym);

#endif
