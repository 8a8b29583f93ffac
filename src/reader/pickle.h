/* A reader for data-only pickles (protocols 0-5): dicts, lists, tuples, strings, bytes,
 * integers of at most 8 bytes, floats, booleans and None, with the memo. Anything that
 * would import or call code (GLOBAL, REDUCE, BUILD, NEWOBJ, persistent ids ...) is
 * refused with a message naming the opcode and its offset; nothing is ever executed.
 * Values live in an arena freed at once. Time is linear in the input and memory a
 * fixed multiple of it, whatever the input: every opcode costs O(1) amortised, the memo
 * is a hash map, and a dict looked up often is searched in O(log n). */
#ifndef MT_PICKLE_H
#define MT_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum pk_type { PK_NONE, PK_BOOL, PK_INT, PK_FLOAT, PK_STR, PK_BYTES, PK_LIST, PK_TUPLE, PK_DICT };

struct pk_value {
	uint8_t type;
	bool sorted; /* a dict whose pairs are sorted by key, one per key (the last given, as Python keeps) */
	union {
		bool b;
		int64_t i;
		double f;
		struct {
			const char *s;
			size_t len;
			uint64_t hash; /* of the bytes, for readers that key tables by a string */
		} str;
		struct {
			struct pk_value **items; /* lists and tuples; dicts: key, value, key, value ... */
			size_t n, cap;
		} seq;
	};
};

struct pk_arena {
	void *blocks;
	size_t used, cap;
};

/* 0, or an errno-style code with err saying what was wrong in one line. */
int pk_parse(const uint8_t *data, size_t size, struct pk_arena *arena, struct pk_value **out, char *err, size_t errlen);
void pk_arena_free(struct pk_arena *arena);

/* Lookups for readers of the result: NULL when absent or of another type. */
const struct pk_value *pk_get(const struct pk_value *dict, const char *key);
bool pk_int(const struct pk_value *v, int64_t *out); /* ints, bools and whole floats in range */
const char *pk_str(const struct pk_value *v);	     /* NUL-terminated */
size_t pk_len(const struct pk_value *v);	     /* items of a list or tuple, pairs of a dict */
const struct pk_value *pk_at(const struct pk_value *seq, size_t i);

#endif
