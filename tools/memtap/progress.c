/* The progress bar: on stderr, only when it is a terminal, and only once an analysis has
 * run for a second (MEMTAP_PROGRESS_DELAY seconds); erased before anything is printed. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "reader/progress.h"

static double started, delay = 1.0;
static bool shown;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void show(const char *what, uint64_t done, uint64_t total)
{
	static const char bar[] = "##############################";
	int width = (int)sizeof bar - 1, filled = total ? (int)((double)done / (double)total * width) : 0;

	if (now() - started < delay)
		return;
	filled = filled > width ? width : filled;
	fprintf(stderr, "\rmemtap: %-14s [%.*s%*s] %3d%%", what, filled, bar, width - filled, "",
		total ? (int)(100.0 * (double)done / (double)total) : 0);
	fflush(stderr);
	shown = true;
}

void progress_start(void)
{
	const char *d = getenv("MEMTAP_PROGRESS_DELAY");

	if (!isatty(STDERR_FILENO))
		return;
	if (d && *d)
		delay = atof(d);
	started = now();
	mt_progress_hook = show;
}

void progress_clear(void)
{
	if (shown)
		fputs("\r\033[K", stderr);
	shown = false;
}

void progress_end(void)
{
	progress_clear();
	mt_progress_hook = NULL;
}
