/* Text taken from an input and put into a message: a message is one line, so a control
 * character (a newline in a JSON key, an escape sequence in a CSV field) never reaches
 * the terminal as itself; and a mistyped word answered with the nearest one known. */
#ifndef MT_TEXT_H
#define MT_TEXT_H

#include <stddef.h>

/* Replaces every control character of s with '?', in place; returns s. */
char *mt_text_line(char *s);

/* s when shorter than size; else its first bytes, cut at a character's start, and "…"
 * (in buf, size bytes, at least 4); NULL stays NULL. */
const char *mt_text_clip(const char *s, char *buf, size_t size);

/* The length of the UTF-8 character at s (1 to 4 bytes), or 0 where s holds none: a
 * stray continuation byte, a sequence cut short, an overlong form or a surrogate. */
size_t mt_utf8_char(const char *s);
/* Cuts a character left unfinished at the end of s (by a copy bounded in bytes); returns s. */
char *mt_utf8_end(char *s);

/* The known word nearest to a mistyped one, for "did you mean": start with {word}, offer
 * each known word, then best is the nearest within a typo or two (an edit, a swap of
 * neighbours; about one per three letters), the first offered of equals, or NULL. */
struct mt_near {
	const char *word, *best;
	size_t distance;
};
void mt_near_offer(struct mt_near *n, const char *candidate);

#endif
