/* The nearest known word to a mistyped one (core/text.h): typos are near, other words not;
 * UTF-8 characters told from bytes that are none, and a text cut inside one ended before it. */
#include <string.h>

#include "../tap.h"
#include "core/text.h"

static const char *nearest(const char *word)
{
	static const char *const known[] = {"run",   "report", "replay",   "diff",   "export",	  "top",
					    "depth", "dir",    "flush_ms", "policy", "policy_dir"};
	struct mt_near n = {word};

	for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
		mt_near_offer(&n, known[i]);
	return n.best ? n.best : "(none)";
}

#define near_is(word, want) ok(strcmp(nearest(word), want) == 0, "%s: %s (%s)", word, want, nearest(word))

int main(void)
{
	near_is("reprot", "report"); /* two neighbours swapped: one edit */
	near_is("rport", "report");
	near_is("repot", "report");
	near_is("replya", "replay");
	near_is("rnu", "run");
	near_is("exprt", "export");
	near_is("dpth", "depth");
	near_is("flushms", "flush_ms");
	near_is("polcy", "policy");
	near_is("policy-dir", "policy_dir");
	near_is("nosuchkey", "(none)");
	near_is("xyz", "(none)"); /* three letters: one edit at most */
	near_is("re", "(none)");
	near_is("run", "(none)"); /* the word itself is not a typo */
	near_is("", "(none)");
	near_is("reportreportreportreportreportreportreportreportreportreportreport", "(none)");

	static const struct {
		const char *s;
		size_t n;
	} chars[] = {{"a", 1},
		     {"\xc3\xa9", 2},
		     {"\xe2\x80\xa6", 3},
		     {"\xf0\x9f\x98\x80", 4},
		     {"\x80", 0},
		     {"\xc3", 0},
		     {"\xe2\x80", 0},
		     {"\xc0\xaf", 0}, /* overlong '/' */
		     {"\xed\xa0\x80", 0},
		     {"\xf4\x90\x80\x80", 0},
		     {"\xff", 0}};
	for (size_t i = 0; i < sizeof chars / sizeof chars[0]; i++)
		ok(mt_utf8_char(chars[i].s) == chars[i].n, "character %zu: %zu bytes", i, chars[i].n);
	char cut[] = "ab\xe2\x80", whole[] = "ab\xe2\x80\xa6", two[] = "\xc3";
	ok(!strcmp(mt_utf8_end(cut), "ab") && !strcmp(mt_utf8_end(whole), "ab\xe2\x80\xa6") && !*mt_utf8_end(two),
	   "a character cut short is ended before it; a whole one kept");
	return done();
}
