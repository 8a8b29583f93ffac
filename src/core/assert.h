/* Assertions by debug level, as Lua's lua_assert and mimalloc's mi_assert_internal:
 * MT_DEBUG 0 (a release build) compiles every one out; 1 checks cheap invariants (a few
 * comparisons, fine on a hot path); 2 also expensive ones (walks of a whole structure).
 * `configure --enable-debug=N` sets it; `quickstart check` builds with 1 (plain) and 2
 * (sanitizers). A failed assertion says where in one line and aborts: a bug in memtap,
 * never a wrong input, which gets an error instead. */
#ifndef MT_ASSERT_H
#define MT_ASSERT_H

#ifndef MT_DEBUG
#define MT_DEBUG 0
#endif

__attribute__((noreturn, cold)) void mt_assert_fail(const char *cond, const char *file, int line);

#define MT_ASSERT_AT(level, cond)                                                                                      \
	do {                                                                                                           \
		if (MT_DEBUG >= (level) && __builtin_expect(!(cond), 0))                                               \
			mt_assert_fail(#cond, __FILE__, __LINE__);                                                     \
	} while (0)
/* a cheap invariant */
#define mt_assert(cond) MT_ASSERT_AT(1, cond)
/* one that walks a structure: test builds only */
#define mt_assert_walk(cond) MT_ASSERT_AT(2, cond)

#endif
