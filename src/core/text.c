/* One-line text for messages (core/text.h). */
#include "core/text.h"

char *mt_text_line(char *s)
{
	for (unsigned char *p = (unsigned char *)s; p && *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			*p = '?';
	return s;
}
