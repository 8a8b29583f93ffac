/* What a library linking dlsym_stub.S provides and gets. The stub exports dlsym;
 * the library defines mt_dlsym_hook, which sees every lookup on a real handle.
 * mt_dlsym_resolve finds glibc's dlsym (GLIBC_2.34, else GLIBC_2.2.5), safely before
 * constructors and sanitizer initialisation. */
#ifndef MT_DLSYM_STUB_H
#define MT_DLSYM_STUB_H

#include <stdbool.h>

typedef void *(*mt_dlsym_fn)(void *, const char *);

#define MT_HIDDEN __attribute__((visibility("hidden")))

extern MT_HIDDEN mt_dlsym_fn mt_real_dlsym;
MT_HIDDEN mt_dlsym_fn mt_dlsym_resolve(void);
MT_HIDDEN void *mt_dlsym_hook(void *handle, const char *name);
/* Optional (weak in the stub): when mt_dlsym_watch is true, every dlsym(RTLD_DEFAULT, name)
 * first calls mt_dlsym_default(name, the caller's return address). */
extern MT_HIDDEN bool mt_dlsym_watch;
MT_HIDDEN void mt_dlsym_default(const char *name, const void *caller);

#endif
