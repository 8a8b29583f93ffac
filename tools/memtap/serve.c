/* memtap report --serve: the report's page on this machine's loopback, and the detail of
 * whatever part of the run the page shows, found when it asks (analyze/html.c), for
 * recordings with far more events than a page can hold. Requests are read as they come,
 * each within a few seconds, and answered one at a time, each connection then closed.
 * Only a page on 127.0.0.1 or localhost at this port is answered, so that no other
 * site's page in the browser can read the trace through a name that points here. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "analyze/fragment.h"
#include "analyze/report.h"
#include "analyze/timeline.h"
#include "cli.h"

#define REQUEST_MAX 8192
#define WAIT_S 5 /* for a request to arrive, and for an answer to be taken */
#define CONNS 16 /* connections waiting for their requests at once */

struct server {
	const struct mt_report *r;
	struct mt_symbols *sym;
	struct mt_timeline_index ix;
	char *page;
	size_t page_len;
	unsigned port;
	/* the segment maps' scan: it has stepped through the events before `stepped` */
	struct mt_fragment_scan *scan;
	struct mt_fragment scratch;
	size_t stepped;
};

static void answer(int fd, int status, const char *type, const char *body, size_t len)
{
	static const char *const words[] = {
	    [200] = "OK",	 [400] = "Bad Request",	       [403] = "Forbidden",
	    [404] = "Not Found", [405] = "Method Not Allowed", [500] = "Internal Server Error"};
	char head[256];
	int n = snprintf(head, sizeof head,
			 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
			 "Connection: close\r\n\r\n",
			 status, words[status], type, len);

	for (int part = 0; part < 2; part++) {
		const char *p = part ? body : head;
		size_t left = part ? len : (size_t)n;
		while (left) {
			ssize_t k = send(fd, p, left, MSG_NOSIGNAL);
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				return; /* the browser went away: its loss */
			p += k, left -= (size_t)k;
		}
	}
}

static void refuse(int fd, int status, const char *why)
{
	answer(fd, status, "text/plain; charset=utf-8", why, strlen(why));
}

/* The value of `name` in the query as a number; false when absent or not one. */
static bool param(const char *query, const char *name, uint64_t *out)
{
	size_t n = strlen(name);

	for (const char *p = query; p && *p; p = strchr(p, '&'), p = p ? p + 1 : NULL) {
		char *end;
		if (strncmp(p, name, n) || p[n] != '=' || p[n + 1] < '0' || p[n + 1] > '9')
			continue;
		errno = 0;
		*out = strtoull(p + n + 1, &end, 10);
		return !errno && (*end == '&' || *end == '\0');
	}
	return false;
}

/* Whether event i changes device d's allocator or its memory: what a segment map shows. */
static bool touches(const struct server *s, size_t i, int d)
{
	const struct mt_event *e = &s->r->trace->events[i];
	struct mt_timeline_change c;

	if (e->kind == MT_EV_SEGMENT_ALLOC || e->kind == MT_EV_SEGMENT_FREE || e->kind == MT_EV_ALLOC_FAILED)
		return e->device == d;
	return mt_timeline_index_step(&s->ix, i, &c) && c.made.device == d;
}

static void drop_scan(struct server *s, int err)
{
	mt_fragment_finish(s->scan, err);
	mt_fragment_free(&s->scratch);
	s->scan = NULL;
}

/* The scan stepped through event i (from the first event again when it is past it). */
static int scan_to(struct server *s, size_t i)
{
	int err = 0;

	if (s->scan && s->stepped > i + 1)
		drop_scan(s, 0);
	if (!s->scan) {
		s->stepped = 0;
		if ((err = mt_fragment_start(&s->scan, &s->scratch, s->r->trace, &s->r->end, true))) {
			drop_scan(s, err);
			return err;
		}
	}
	for (; s->stepped <= i && !err; s->stepped++)
		err = mt_fragment_step(s->scan, &s->r->trace->events[s->stepped], s->stepped);
	return err;
}

/* /map?device=D&time=T: device D's segments after its last event at or before T;
 * &event=I: after event I; either with &step=1: after the device's next event, or
 * &back=1: its last before. Returns the event, SIZE_MAX when there is none. */
static size_t map_event(const struct server *s, const char *q, int d)
{
	const struct mt_trace *t = s->r->trace;
	uint64_t time, event, step = 0, back = 0;
	size_t at = SIZE_MAX, i; /* the event the question starts from; SIZE_MAX: before the first */

	if (param(q, "time", &time)) {
		size_t lo = 0, hi = t->nevents; /* past the last event at or before T */
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (mt_report_since(s->r, t->events[mid].time) <= time)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (i = lo; i-- > 0 && at == SIZE_MAX;)
			if (touches(s, i, d))
				at = i;
	} else if (!param(q, "event", &event) || event >= t->nevents) {
		return SIZE_MAX;
	} else {
		at = (size_t)event;
	}
	param(q, "step", &step);
	param(q, "back", &back);
	if (back)
		for (i = at == SIZE_MAX ? 0 : at; i-- > 0;)
			if (touches(s, i, d))
				return i;
	if (step && !back)
		for (i = at == SIZE_MAX ? 0 : at + 1; i < t->nevents; i++)
			if (touches(s, i, d))
				return i;
	return at; /* no event that way: where it was */
}

static void respond(struct server *s, int fd, const char *target)
{
	const char *mark = strchr(target, '?'), *q = mark ? mark + 1 : "";
	size_t path = mark ? (size_t)(mark - target) : strlen(target);
	uint64_t d, from, to, moment;
	char *body = NULL;
	size_t len = 0;
	FILE *out;
	int err;

	if (path == 1 && target[0] == '/') {
		answer(fd, 200, "text/html; charset=utf-8", s->page, s->page_len);
		return;
	}
	bool range = path == 6 && !strncmp(target, "/range", 6), map = path == 4 && !strncmp(target, "/map", 4);
	if (!range && !map) {
		refuse(fd, 404, "memtap report --serve: no such page: / the report, /range and /map its detail\n");
		return;
	}
	if (!param(q, "device", &d) || d >= MT_MAX_DEVICES ||
	    (range && (!param(q, "from", &from) || !param(q, "to", &to) || from > to)) ||
	    (map && !param(q, "time", &moment) && !param(q, "event", &moment))) {
		refuse(fd, 400,
		       range ? "/range needs device=D&from=NS&to=NS, from <= to\n"
			     : "/map needs device=D and time=NS or event=I\n");
		return;
	}
	if (!(out = open_memstream(&body, &len))) {
		refuse(fd, 500, "out of memory\n");
		return;
	}
	if (range) {
		err = mt_report_html_range(out, &s->ix, s->sym, (int)d, from, to);
	} else {
		size_t i = map_event(s, q, (int)d);
		err = i == SIZE_MAX ? (fputs("{\"event\": null}", out), 0) : scan_to(s, i);
		if (i != SIZE_MAX && !err)
			err = mt_report_html_map(out, &s->ix, s->scan, (int)d, i);
	}
	if (fclose(out) && !err)
		err = ENOMEM;
	if (err)
		refuse(fd, 500, "out of memory\n");
	else
		answer(fd, 200, "application/json", body, len);
	free(body);
}

/* Whether the request's Host names this server by its loopback address or name and port. */
static bool ours(const char *request, unsigned port)
{
	char ip[32], name[32];

	snprintf(ip, sizeof ip, "127.0.0.1:%u", port);
	snprintf(name, sizeof name, "localhost:%u", port);
	for (const char *p = request; (p = strstr(p, "\r\n")); p += 2) {
		if (strncasecmp(p + 2, "host:", 5))
			continue;
		const char *v = p + 7 + strspn(p + 7, " \t");
		size_t n = strcspn(v, " \t\r");
		return (n == strlen(ip) && !strncmp(v, ip, n)) || (n == strlen(name) && !strncasecmp(v, name, n));
	}
	return false;
}

/* A connection whose request is still coming: a browser opens some ahead of need and
 * leaves them idle, so each waits apart, and one that stays quiet is closed. */
struct conn {
	int fd;
	size_t n;
	time_t since;
	char req[REQUEST_MAX + 1];
};

/* Reads what has come; true when the connection is done with (answered, or gone). */
static bool take(struct server *s, struct conn *c)
{
	struct timeval wait = {.tv_sec = WAIT_S};
	char *target, *end;
	ssize_t k = recv(c->fd, c->req + c->n, REQUEST_MAX - c->n, 0);

	if (k < 0 && (errno == EINTR || errno == EAGAIN))
		return false;
	if (k <= 0)
		return true;
	c->n += (size_t)k;
	c->req[c->n] = '\0';
	if (!strstr(c->req, "\r\n\r\n")) { /* to the end of the headers; a body is not read */
		if (c->n < REQUEST_MAX)
			return false;
		refuse(c->fd, 400, "a request's headers end with an empty line, within 8 KiB\n");
		return true;
	}
	fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) & ~O_NONBLOCK); /* the answer goes out whole, or in 5 s */
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof wait);
	if (strncmp(c->req, "GET /", 5)) {
		refuse(c->fd, 405, "memtap report --serve answers GET only\n");
		return true;
	}
	if (!ours(c->req, s->port)) {
		refuse(c->fd, 403,
		       "memtap report --serve answers requests for 127.0.0.1 or localhost at its port only\n");
		return true;
	}
	target = c->req + 4;
	end = target + strcspn(target, " \r\n");
	*end = '\0';
	respond(s, c->fd, target);
	return true;
}

_Noreturn void serve_report(struct mt_report *r, struct mt_symbols *sym, size_t top, unsigned port)
{
	struct server s = {.r = r, .sym = sym};
	struct sockaddr_in at = {
	    .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof at;
	static struct conn conns[CONNS];
	size_t nconns = 0;
	FILE *page;
	int fd, one = 1, err;

	r->served = true;
	if (!(page = open_memstream(&s.page, &s.page_len)))
		die(1, "out of memory");
	err = mt_report_html(page, r, sym, top);
	if (fclose(page) || err || mt_timeline_index_build(&s.ix, r))
		die(1, "out of memory while making the page");
	progress_end();
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
	    bind(fd, (struct sockaddr *)&at, sizeof at) || listen(fd, 16) ||
	    getsockname(fd, (struct sockaddr *)&at, &len))
		die(1, "cannot serve on 127.0.0.1:%u: %s", port, strerror(errno));
	s.port = ntohs(at.sin_port);
	printf("memtap: serving the report of %s at http://127.0.0.1:%u/ (Ctrl-C to stop)\n", r->trace->path, s.port);
	fflush(stdout);
	for (struct pollfd p[1 + CONNS];;) { /* one request answered at a time, as it completes */
		p[0] = (struct pollfd){.fd = fd, .events = POLLIN};
		for (size_t i = 0; i < nconns; i++)
			p[1 + i] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN};
		if (poll(p, 1 + nconns, 1000) < 0 && errno != EINTR)
			die(1, "cannot wait for requests: %s", strerror(errno));
		for (size_t i = nconns; i-- > 0;)
			if (((p[1 + i].revents && take(&s, &conns[i])) || time(NULL) - conns[i].since > WAIT_S)) {
				close(conns[i].fd);
				conns[i] = conns[--nconns];
			}
		if (!(p[0].revents & POLLIN))
			continue;
		int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (c < 0 && (errno == EMFILE || errno == ENFILE))
			sleep(1); /* until a descriptor is free again */
		else if (c < 0 && errno != EINTR && errno != ECONNABORTED && errno != EAGAIN)
			die(1, "cannot take a connection: %s", strerror(errno));
		else if (c >= 0 && nconns == CONNS)
			close(c); /* too many waiting: the browser asks again */
		else if (c >= 0)
			conns[nconns].fd = c, conns[nconns].n = 0, conns[nconns++].since = time(NULL);
	}
}
