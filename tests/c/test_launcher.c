/* test_launcher.c -- the launcher's pure helpers: SLURM node list expansion. */
#include <string.h>

#include "check.h"
#include "dist/nodelist.h"

/* Host index i of list, or "ERR" when the call fails. */
static const char *host(const char *list, int i) {
  static char buf[64];
  if (nodelist_host(buf, sizeof buf, list, i) != 0) return "ERR";
  return buf;
}

int main(void) {
  CHECK(nodelist_count("node7") == 1);
  CHECK(strcmp(host("node7", 0), "node7") == 0);
  CHECK(strcmp(host("node7", 1), "ERR") == 0);

  const char *l = "gpu[001-004,010],cpu7";
  CHECK(nodelist_count(l) == 6, "%d", nodelist_count(l));
  CHECK(strcmp(host(l, 0), "gpu001") == 0, "%s", host(l, 0));
  CHECK(strcmp(host(l, 3), "gpu004") == 0, "%s", host(l, 3));
  CHECK(strcmp(host(l, 4), "gpu010") == 0, "%s", host(l, 4));
  CHECK(strcmp(host(l, 5), "cpu7") == 0, "%s", host(l, 5));
  CHECK(strcmp(host(l, 6), "ERR") == 0);
  CHECK(strcmp(host(l, -1), "ERR") == 0);

  /* a suffix after the brackets, ranges crossing a digit boundary */
  CHECK(nodelist_count("n[8-11].ib,login") == 5);
  CHECK(strcmp(host("n[8-11].ib,login", 2), "n10.ib") == 0, "%s", host("n[8-11].ib,login", 2));
  CHECK(strcmp(host("n[098-101]", 3), "n101") == 0, "%s", host("n[098-101]", 3));
  CHECK(strcmp(host("[1-2]", 1), "2") == 0);

  /* malformed lists are errors, never a crash */
  
  CHECK(nodelist_count("") < 0);
  CHECK(strstr(nodelist_error(), "bad node list") != NULL, "%s", nodelist_error());
  CHECK(nodelist_count("a[1-2") < 0);
  CHECK(nodelist_count("a[]") < 0);
  CHECK(nodelist_count("a[3-1]") < 0);
  CHECK(nodelist_count("a[x]") < 0);
  CHECK(nodelist_count("a,,b") < 0);
  CHECK(nodelist_count("a,") < 0);
  CHECK(nodelist_count("a[1-2]b[3]") < 0);
  CHECK(nodelist_count("a[1-]") < 0);
  CHECK(nodelist_count(NULL) < 0);
  CHECK(nodelist_count("x[0-9999999]") < 0);
  /* a name that does not fit the buffer */
  char small[4];
  CHECK(nodelist_host(small, sizeof small, "gpu[001]", 0) < 0);
  CHECK(nodelist_host(small, sizeof small, "abc", 0) == 0 && strcmp(small, "abc") == 0);
  return check_report("test_launcher");
}
