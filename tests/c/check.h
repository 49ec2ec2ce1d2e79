/* check.h -- the C unit tests' one assertion: CHECK(cond[, fmt, ...])
** counts a pass or prints "FAIL file:line: cond: note (last error)"; each
** test ends with check_report(name), whose line the test runner reads. */
#ifndef DL_CHECK_H
#define DL_CHECK_H

#include <stdarg.h>
#include <stdio.h>

#include "ddplua.h"

static int passed, failed;

static void check_fail(const char *file, int line, const char *cond,
                       const char *fmt, ...) {
  va_list ap;
  failed++;
  printf("FAIL %s:%d: %s", file, line, cond);
  if (fmt && *fmt) {
    printf(": ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
  }
  if (*dl_last_error()) printf(" (last error: %s)", dl_last_error());
  printf("\n");
}

/* "" __VA_ARGS__ makes the note optional: CHECK(x) or CHECK(x, "%d", n). */
#define CHECK(cond, ...)                                            \
  do {                                                              \
    if (cond)                                                       \
      passed++;                                                     \
    else                                                            \
      check_fail(__FILE__, __LINE__, #cond, "" __VA_ARGS__);        \
  } while (0)

static int check_report(const char *name) {
  printf("%s: %d passed, %d failed\n", name, passed, failed);
  return failed != 0;
}

#endif
