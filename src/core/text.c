/* One-line text for messages, and the nearest known word to a mistyped one (core/text.h). */
#include <stdio.h>
#include <string.h>

#include "core/text.h"

enum { NEAR_MAX = 64 }; /* longer words are never near */

char *mt_text_line(char *s)
{
	for (unsigned char *p = (unsigned char *)s; p && *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			*p = '?';
	return s;
}

static size_t min3(size_t a, size_t b, size_t c)
{
	return a < b ? (a < c ? a : c) : (b < c ? b : c);
}

/* Edits (insert, delete, replace, swap two neighbours) from a to b: the optimal string
 * alignment distance, three rows of the table at a time. */
static size_t distance(const char *a, size_t n, const char *b, size_t m)
{
	size_t rows[3][NEAR_MAX + 1], *two = rows[0], *prev = rows[1], *cur = rows[2];

	for (size_t j = 0; j <= m; j++)
		prev[j] = j;
	for (size_t i = 1; i <= n; i++) {
		cur[0] = i;
		for (size_t j = 1; j <= m; j++) {
			cur[j] = min3(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]));
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && two[j - 2] + 1 < cur[j])
				cur[j] = two[j - 2] + 1;
		}
		size_t *t = two;
		two = prev;
		prev = cur;
		cur = t;
	}
	return prev[m];
}

void mt_near_offer(struct mt_near *n, const char *candidate)
{
	size_t a = strlen(n->word), b = strlen(candidate), d;

	if (a > NEAR_MAX || b > NEAR_MAX || !a)
		return;
	d = distance(n->word, a, candidate, b);
	if (d && d <= (b + 2) / 3 && d < b && (!n->best || d < n->distance)) {
		n->best = candidate;
		n->distance = d;
	}
}

size_t mt_utf8_char(const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t n = u[0] < 0x80			  ? 1
		   : u[0] >= 0xC2 && u[0] <= 0xDF ? 2
		   : u[0] >= 0xE0 && u[0] <= 0xEF ? 3
		   : u[0] >= 0xF0 && u[0] <= 0xF4 ? 4
						  : 0;

	for (size_t i = 1; i < n; i++)
		if ((u[i] & 0xC0) != 0x80)
			return 0;
	if ((n == 3 && ((u[0] == 0xE0 && u[1] < 0xA0) || (u[0] == 0xED && u[1] >= 0xA0))) || /* overlong; surrogate */
	    (n == 4 && ((u[0] == 0xF0 && u[1] < 0x90) || (u[0] == 0xF4 && u[1] >= 0x90)))) /* overlong; past U+10FFFF */
		return 0;
	return n;
}

char *mt_utf8_end(char *s)
{
	size_t len = strlen(s), k = len;

	while (k > 0 && len - k < 4 && ((unsigned char)s[k - 1] & 0xC0) == 0x80)
		k--;
	if (k > 0 && (unsigned char)s[k - 1] >= 0xC0 && !mt_utf8_char(s + k - 1))
		s[k - 1] = '\0'; /* a lead byte whose character does not end */
	return s;
}

const char *mt_text_clip(const char *s, char *buf, size_t size)
{
	size_t n;

	if (!s || strlen(s) < size)
		return s;
	for (n = size - 4; n && (s[n] & 0xC0) == 0x80; n--)
		;
	snprintf(buf, size, "%.*s\xe2\x80\xa6", (int)n, s);
	return buf;
}
