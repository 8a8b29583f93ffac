/* Text taken from an input and put into a message: a message is one line, so a control
 * character (a newline in a JSON key, an escape sequence in a CSV field) never reaches
 * the terminal as itself. */
#ifndef MT_TEXT_H
#define MT_TEXT_H

/* Replaces every control character of s with '?', in place; returns s. */
char *mt_text_line(char *s);

#endif
