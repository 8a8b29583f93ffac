/* Reserved address space, the pointer-keyed table, the sorted extents that say where a
 * pointer lies, and the handle registry behind simgpu's bookkeeping.
 * The space is one PROT_NONE mapping placed at a fixed address when it is free, so a
 * deterministic program sees the same device pointers on every run. */
#include "sim.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

int sim_space_init(struct sim_space *sp, uintptr_t want_base, size_t size)
{
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
	void *p = want_base ? mmap((void *)want_base, size, PROT_NONE, flags | MAP_FIXED_NOREPLACE, -1, 0) : MAP_FAILED;

	if (p == MAP_FAILED || (uintptr_t)p != want_base) {
		/* taken, or refused by a sanitizer's layout: take any address instead */
		if (p != MAP_FAILED)
			munmap(p, size);
		p = mmap(NULL, size + SIM_GRANULE, PROT_NONE, flags, -1, 0);
		if (p == MAP_FAILED)
			return ENOMEM;
	}
	sp->base = ((uintptr_t)p + SIM_GRANULE - 1) & ~(uintptr_t)(SIM_GRANULE - 1);
	sp->size = size;
	sp->cap = 16;
	sp->free = calloc(sp->cap, sizeof *sp->free);
	if (!sp->free)
		return ENOMEM;
	sp->free[0] = (struct sim_range){sp->base, size};
	sp->nfree = 1;
	return 0;
}

static int insert_at(struct sim_space *sp, size_t i, struct sim_range r)
{
	if (sp->nfree == sp->cap) {
		struct sim_range *n = realloc(sp->free, 2 * sp->cap * sizeof *n);
		if (!n)
			return ENOMEM;
		sp->free = n;
		sp->cap *= 2;
	}
	memmove(&sp->free[i + 1], &sp->free[i], (sp->nfree - i) * sizeof *sp->free);
	sp->free[i] = r;
	sp->nfree++;
	return 0;
}

static void remove_at(struct sim_space *sp, size_t i)
{
	memmove(&sp->free[i], &sp->free[i + 1], (sp->nfree - i - 1) * sizeof *sp->free);
	sp->nfree--;
}

/* Carve [start, start+size) out of free range i, which must contain it. */
static int carve(struct sim_space *sp, size_t i, uintptr_t start, size_t size)
{
	struct sim_range r = sp->free[i];
	uintptr_t end = start + size, rend = r.start + r.size;

	if (start == r.start && end == rend) {
		remove_at(sp, i);
		return 0;
	}
	if (start == r.start) {
		sp->free[i] = (struct sim_range){end, rend - end};
		return 0;
	}
	sp->free[i].size = start - r.start;
	if (end == rend)
		return 0;
	return insert_at(sp, i + 1, (struct sim_range){end, rend - end});
}

int sim_space_alloc(struct sim_space *sp, size_t size, size_t align, uintptr_t want, uintptr_t *out)
{
	for (size_t i = 0; i < sp->nfree; i++) {
		struct sim_range r = sp->free[i];
		uintptr_t start = want ? want : (r.start + align - 1) & ~(uintptr_t)(align - 1);

		if (start < r.start || start + size > r.start + r.size || start + size < start)
			continue;
		if (carve(sp, i, start, size))
			return ENOMEM;
		*out = start;
		return 0;
	}
	return want ? EEXIST : ENOMEM;
}

void sim_space_free(struct sim_space *sp, uintptr_t start, size_t size)
{
	size_t i = 0;

	while (i < sp->nfree && sp->free[i].start < start)
		i++;
	bool join_prev = i > 0 && sp->free[i - 1].start + sp->free[i - 1].size == start;
	bool join_next = i < sp->nfree && start + size == sp->free[i].start;

	if (join_prev && join_next) {
		sp->free[i - 1].size += size + sp->free[i].size;
		remove_at(sp, i);
	} else if (join_prev) {
		sp->free[i - 1].size += size;
	} else if (join_next) {
		sp->free[i].start = start;
		sp->free[i].size += size;
	} else if (insert_at(sp, i, (struct sim_range){start, size})) {
		/* out of host memory for bookkeeping: the range is lost to reuse, not to accounting */
	}
}

/* ---- pointer-keyed table ------------------------------------------------------------ */

#define TOMBSTONE ((void *)-1)

static size_t slot_of(uintptr_t key, size_t cap)
{
	uint64_t h = (uint64_t)key * 0x9e3779b97f4a7c15ull;
	return (size_t)(h >> 17) & (cap - 1);
}

void *sim_map_get(const struct sim_map *m, uintptr_t key)
{
	if (!m->cap)
		return NULL;
	for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
		if (!m->vals[i])
			return NULL;
		if (m->vals[i] != TOMBSTONE && m->keys[i] == key)
			return m->vals[i];
	}
}

static int grow(struct sim_map *m)
{
	struct sim_map n = {.cap = 64}; /* sized from live entries: tombstones are dropped */

	while (n.cap < 4 * (m->count + 1))
		n.cap *= 2;
	n.keys = calloc(n.cap, sizeof *n.keys);
	n.vals = calloc(n.cap, sizeof *n.vals);
	if (!n.keys || !n.vals) {
		free(n.keys);
		free(n.vals);
		return ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++)
		if (m->vals[i] && m->vals[i] != TOMBSTONE)
			sim_map_put(&n, m->keys[i], m->vals[i]);
	free(m->keys);
	free(m->vals);
	*m = n;
	return 0;
}

int sim_map_put(struct sim_map *m, uintptr_t key, void *val)
{
	if (2 * (m->used + 1) > m->cap && grow(m))
		return ENOMEM;
	size_t i = slot_of(key, m->cap);
	while (m->vals[i] && m->vals[i] != TOMBSTONE && m->keys[i] != key)
		i = (i + 1) & (m->cap - 1);
	if (!m->vals[i])
		m->used++;
	if (!m->vals[i] || m->vals[i] == TOMBSTONE)
		m->count++;
	m->keys[i] = key;
	m->vals[i] = val;
	return 0;
}

void *sim_map_del(struct sim_map *m, uintptr_t key)
{
	if (!m->cap)
		return NULL;
	for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
		if (!m->vals[i])
			return NULL;
		if (m->vals[i] != TOMBSTONE && m->keys[i] == key) {
			void *v = m->vals[i];
			m->vals[i] = TOMBSTONE;
			m->count--;
			return v;
		}
	}
}

void *sim_map_at(const struct sim_map *m, size_t slot)
{
	void *v = slot < m->cap ? m->vals[slot] : NULL;
	return v == TOMBSTONE ? NULL : v;
}

/* ---- extents: the live ranges, sorted by start ---------------------------------------- */

/* The first extent starting after addr. */
static size_t upper(uintptr_t addr)
{
	size_t lo = 0, hi = sim.nextents;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (sim.extents[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int sim_extent_add(uintptr_t start, size_t size, enum sim_ext kind, int device, void *owner)
{
	size_t i = upper(start);

	if (sim.nextents == sim.capextents) {
		size_t cap = sim.capextents ? 2 * sim.capextents : 64;
		struct sim_extent *n = realloc(sim.extents, cap * sizeof *n);
		if (!n)
			return ENOMEM;
		sim.extents = n;
		sim.capextents = cap;
	}
	memmove(&sim.extents[i + 1], &sim.extents[i], (sim.nextents - i) * sizeof *sim.extents);
	sim.extents[i] = (struct sim_extent){start, size, kind, device, owner};
	sim.nextents++;
	return 0;
}

void sim_extent_del(uintptr_t start)
{
	size_t i = upper(start);

	if (i == 0 || sim.extents[i - 1].start != start)
		return;
	i--;
	memmove(&sim.extents[i], &sim.extents[i + 1], (sim.nextents - i - 1) * sizeof *sim.extents);
	sim.nextents--;
}

const struct sim_extent *sim_extent_find(uintptr_t addr)
{
	size_t i = upper(addr);

	if (i == 0)
		return NULL;
	const struct sim_extent *e = &sim.extents[i - 1];
	return addr - e->start < e->size ? e : NULL;
}

static bool in_space(const struct sim_space *sp, uintptr_t p)
{
	return sp->size && p >= sp->base && p - sp->base < sp->size;
}

CUresult sim_locate(uintptr_t p, size_t n, enum sim_where *where, int *device)
{
	const struct sim_extent *e = sim_extent_find(p);

	*device = -1;
	if (!e) {
		/* simgpu's spaces hold nothing but device memory; any other address is the host's */
		for (int i = 0; i < sim.ndev; i++)
			if (in_space(&sim.dev[i].space, p))
				return CUDA_ERROR_INVALID_VALUE;
		if (in_space(&sim.va, p))
			return CUDA_ERROR_INVALID_VALUE;
		*where = SIM_HOST;
		return CUDA_SUCCESS;
	}
	if (n > e->size - (p - e->start))
		return CUDA_ERROR_INVALID_VALUE;
	*device = e->device;
	switch (e->kind) {
	case SIM_EXT_BLOCK: {
		const struct sim_block *b = e->owner;
		if (b->cached)
			return CUDA_ERROR_INVALID_VALUE;
		*where = b->kind == SIM_KIND_MANAGED || b->kind == SIM_KIND_HOST ? SIM_HOST : SIM_DEVICE;
		return CUDA_SUCCESS;
	}
	case SIM_EXT_REGISTERED:
		*where = SIM_HOST;
		return CUDA_SUCCESS;
	default:
		*where = SIM_DEVICE;
		return CUDA_SUCCESS;
	}
}

/* ---- handles ---------------------------------------------------------------------------- */

int sim_obj_add(const void *h, enum sim_obj kind)
{
	return sim_map_put(&sim.objects, (uintptr_t)h, (void *)(uintptr_t)kind);
}

void sim_obj_del(const void *h)
{
	sim_map_del(&sim.objects, (uintptr_t)h);
}

bool sim_obj_is(const void *h, enum sim_obj kind)
{
	return h && (uintptr_t)sim_map_get(&sim.objects, (uintptr_t)h) == (uintptr_t)kind;
}
