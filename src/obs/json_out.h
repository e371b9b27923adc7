/* json_out.h — the one writer of JSON strings and numbers: every string any program of the tree
 * puts into a JSON file (summary.json, log.jsonl, the timelines, dp_devices.json, the memory
 * ledger, the safetensors header of an export, the step account) goes through it.
 *
 * Strings may come from outside (a dataset's path, a folder name, a checkpoint's settings) and
 * hold any bytes, while JSON text is UTF-8 (RFC 8259) and strict readers (Python's json on bytes,
 * browsers, serde) refuse anything else. So: '"', '\\' and control characters are escaped;
 * well-formed UTF-8 is copied as it is; every byte that is not part of a well-formed UTF-8
 * sequence (a Latin-1 file name, a cut sequence, an overlong form, a UTF-16 surrogate, a code
 * point above U+10FFFF) is written as \ufffd, the replacement character, one per byte. The
 * output is pure ASCII apart from the copied sequences, and always valid JSON. Numbers: %.9g,
 * non-finite ones as null (JSON has no NaN). */
#ifndef SRC_OBS_JSON_OUT_H
#define SRC_OBS_JSON_OUT_H

#include <stddef.h>
#include <stdio.h>

/* s as a JSON string literal, quotes included. */
void json_string(FILE *f, const char *s);
/* The same into buf (len bytes, always NUL-terminated when len > 0): the length of the whole
 * literal, quotes included, as snprintf returns it (>= len: it was cut). */
size_t json_string_buf(char *buf, size_t len, const char *s);
/* A number: non-finite values become null. */
void json_number(FILE *f, double v);

#endif
