/* A reader for data-only pickles (protocols 0-5): dicts, lists, tuples, strings, bytes,
 * integers of at most 8 bytes, floats, booleans and None, with the memo. Anything that
 * would import or call code (GLOBAL, REDUCE, BUILD, NEWOBJ, persistent ids ...) is
 * refused with a message naming the opcode and its offset; nothing is ever executed.
 * Time is linear in the input and memory a fixed multiple of it, whatever the input:
 * every opcode costs O(1) amortised, the memo is an array (a hash map for far indices),
 * and a dict looked up often is sorted once and searched in O(log n).
 *
 * Streaming: a reader of the result may take the items of a list as they are appended
 * (pk_stream's hook) and turn values it has read into tokens (pk_token), so what it has
 * converted is given back at once; values are counted references in an arena with free
 * lists, and nothing still referenced is ever given back. */
#ifndef MT_PICKLE_H
#define MT_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum pk_type { PK_NONE, PK_BOOL, PK_INT, PK_FLOAT, PK_STR, PK_BYTES, PK_LIST, PK_TUPLE, PK_DICT, PK_TOKEN };

struct pk_value {
	uint8_t type;
	bool sorted;   /* a dict whose pairs are sorted by key, one per key (the last given, as Python keeps) */
	uint8_t tag;   /* PK_TOKEN: what the reader made of it, in the reader's own numbering; payload in i */
	uint32_t refs; /* stack slots, containers and memo entries holding it */
	uint32_t memo; /* the memo index it was last stored at, + 1; 0: none */
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

#define PK_CLASSES 21 /* size classes of the arena's free lists: 16 to 128 bytes by 16, then powers of two to 1 MiB */

struct pk_arena {
	void *blocks;
	size_t used, cap;
	void *free[PK_CLASSES];
	void *large;  /* blocks past 1 MiB, each on its own */
	size_t bytes; /* held by values now, and the most ever: for benchmarks and tests */
	size_t peak;
};

struct pk_reader;

/* items: those about to be appended to `list` (APPEND, APPENDS, LIST): setting *taken
 * keeps them out of it, the hook has used them. dict: a dict whose pairs from `first` (an
 * index of its items) were just set (SETITEMS, DICT; not SETITEM's single pair), to turn
 * what they hold into tokens. Nonzero from either stops the read with that code (the
 * hook writes the message). */
struct pk_hooks {
	void *ctx;
	bool mapped; /* the input is a file's private mapping: pages read are given back as the reader passes them */
	int (*items)(void *ctx, struct pk_reader *r, const struct pk_value *list, struct pk_value *const *items,
		     size_t n, bool *taken);
	int (*dict)(void *ctx, struct pk_reader *r, struct pk_value *dict, size_t first);
	/* ahead: items above a mark right over a list, a thousand at a time while they come,
	   before the APPENDS that would append them (a pickler other than Python's writes a
	   list in one batch, however long). *used: how many of the first it took (whole
	   values it has read); they leave the stack (should the mark turn out to be another's,
	   a TUPLE's, they are not in it), the rest come again with the next thousand. */
	int (*ahead)(void *ctx, struct pk_reader *r, const struct pk_value *list, struct pk_value *const *items,
		     size_t n, size_t *used);
};

/* 0, or an errno-style code with err saying what was wrong in one line. */
int pk_parse(const uint8_t *data, size_t size, struct pk_arena *arena, struct pk_value **out, char *err, size_t errlen);
/* The same with a hook (NULL: none). */
int pk_stream(const uint8_t *data, size_t size, struct pk_arena *arena, const struct pk_hooks *hooks,
	      struct pk_value **out, char *err, size_t errlen);
/* From a hook: v, a list, tuple or dict, has been read (not a string: equal strings are
 * one value, shared wherever they were written). It becomes a token (tag, payload) —
 * itself, and what the memo gives for it from now on — and what it held is given back. */
void pk_token(struct pk_reader *r, struct pk_value *v, uint8_t tag, int64_t payload);
/* From a hook: v is kept while the hook looks through it (a token made of what it holds
 * may give back the last other reference to it), then let go. */
void pk_hold(struct pk_value *v);
void pk_release(struct pk_reader *r, struct pk_value *v);
void pk_arena_free(struct pk_arena *arena);

/* Lookups for readers of the result: NULL when absent or of another type. */
const struct pk_value *pk_get(const struct pk_value *dict, const char *key);
bool pk_int(const struct pk_value *v, int64_t *out); /* ints, bools and whole floats in range */
const char *pk_str(const struct pk_value *v);	     /* NUL-terminated */
size_t pk_len(const struct pk_value *v);	     /* items of a list or tuple, pairs of a dict */
const struct pk_value *pk_at(const struct pk_value *seq, size_t i);

#endif
