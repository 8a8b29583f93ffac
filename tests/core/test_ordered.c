/* The ordered set (core/ordered.h) against a plain sorted array: random adds and
 * removes that fill, split and empty blocks, keys in rising, falling and random order,
 * and "first key at or after" everywhere, including past the ends. */
#include <stdlib.h>
#include <string.h>

#include "../tap.h"
#include "core/ordered.h"

/* The model: a sorted array of distinct keys. */
static uint64_t model[20000];
static size_t nmodel;

static size_t lower(uint64_t key)
{
	size_t lo = 0, hi = nmodel;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (model[mid] < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void model_add(uint64_t key)
{
	size_t i = lower(key);

	if (i < nmodel && model[i] == key)
		return;
	memmove(model + i + 1, model + i, (nmodel - i) * sizeof *model);
	model[i] = key;
	nmodel++;
}

static void model_del(uint64_t key)
{
	size_t i = lower(key);

	if (i < nmodel && model[i] == key) {
		memmove(model + i, model + i + 1, (nmodel - i - 1) * sizeof *model);
		nmodel--;
	}
}

/* Every key of the model found in order, nothing between them, nothing after. */
static int agrees(const struct mt_ordered *o)
{
	uint64_t key = 0, got;

	for (size_t i = 0; i < nmodel; i++) {
		if (!mt_ordered_next(o, key, &got) || got != model[i])
			return 0;
		key = got + 1;
	}
	return nmodel && model[nmodel - 1] == UINT64_MAX ? 1 : !mt_ordered_next(o, key, &got);
}

int main(void)
{
	struct mt_ordered o = {0};
	uint64_t got;
	int fine = 1;

	ok(!mt_ordered_next(&o, 0, &got), "an empty set has no key");
	mt_ordered_del(&o, 5);
	for (uint64_t k = 0; k < 3000; k++)
		fine &= mt_ordered_add(&o, k * 10) == 0, model_add(k * 10);
	ok(fine && agrees(&o), "3000 rising keys: every block filled and split in order");
	ok(mt_ordered_next(&o, 15, &got) && got == 20, "the first key at or after one between keys");
	ok(mt_ordered_next(&o, 20, &got) && got == 20, "at or after a key: the key");
	ok(!mt_ordered_next(&o, 29991, &got), "nothing after the last key");
	for (uint64_t k = 3000; k-- > 0;)
		mt_ordered_add(&o, k * 10 + 5), model_add(k * 10 + 5);
	ok(agrees(&o), "3000 falling keys between them: splits at the front of blocks");
	mt_ordered_add(&o, 20), model_add(20);
	ok(agrees(&o), "a key added twice is held once");
	for (int round = 0; round < 40000; round++) {
		uint64_t key = tap_random() % 20000;
		if (tap_random() % 3 || nmodel + 1 >= sizeof model / sizeof *model)
			mt_ordered_del(&o, key), model_del(key);
		else
			fine &= mt_ordered_add(&o, key) == 0, model_add(key);
		if (round % 1000 == 0)
			fine &= agrees(&o);
	}
	ok(fine && agrees(&o), "40000 random adds and removes agree with a sorted array");
	while (nmodel)
		mt_ordered_del(&o, model[nmodel - 1]), model_del(model[nmodel - 1]);
	ok(o.n == 0 && !mt_ordered_next(&o, 0, &got), "removing every key leaves no block");
	mt_ordered_add(&o, UINT64_MAX), model_add(UINT64_MAX);
	mt_ordered_add(&o, 0), model_add(0);
	ok(agrees(&o) && mt_ordered_next(&o, 1, &got) && got == UINT64_MAX, "the smallest and largest keys");
	mt_ordered_free(&o);
	return done();
}
