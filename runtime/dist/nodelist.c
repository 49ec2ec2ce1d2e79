/* nodelist.c -- SLURM's compressed host lists ("gpu[001-004,010],cpu7"), expanded for the launch layout (launch_env.c) and the launcher. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddplua.h"
#include "dist/nodelist.h"

/* The last failure's text, for nodelist_error(); per thread, as dl_err's. */
static _Thread_local char last_error[256];

static int fail(const char *list, const char *why) {
  snprintf(last_error, sizeof last_error, "bad node list \"%.160s\": %s", list, why);
  return -1;
}

/* Walks list host by host without building it: a job's list can name
** thousands of hosts, and the launcher only needs the count and one name.
** Returns the number of hosts; when want >= 0 and the want-th host exists,
** also writes it to out (cap bytes).  -1 (nodelist_error() says why) on a syntax error or a
** name longer than cap.  One bracket group per item (a[1-2]b[3-4] is an
** error), as SLURM prints lists for homogeneous clusters. */
static int nodelist_walk(const char *list, int want, char *out, int cap) {
  if (!list) return fail("(null)", "no list");
  const char *p = list;
  int count = 0;
  while (*p) {
    const char *pre = p;
    while (*p && *p != ',' && *p != '[') p++;
    int plen = (int)(p - pre);
    if (*p != '[') { /* a plain name */
      if (plen == 0) return fail(list, "empty host name");
      if (count == want) {
        if (plen >= cap) return fail(list, "host name too long");
        memcpy(out, pre, (size_t)plen);
        out[plen] = '\0';
      }
      count++;
    } else {
      const char *ranges = ++p;
      while (*p && *p != ']') {
        if (*p == '[') return fail(list, "nested '['");
        p++;
      }
      if (*p != ']') return fail(list, "missing ']'");
      const char *rend = p++;
      const char *suf = p;
      while (*p && *p != ',') {
        if (*p == '[' || *p == ']')
          return fail(list, "more than one bracket group in a name");
        p++;
      }
      int slen = (int)(p - suf);
      const char *r = ranges;
      while (r < rend) {
        char *end;
        const char *digits = r;
        if (*r < '0' || *r > '9') return fail(list, "expected a number in brackets");
        long lo = strtol(r, &end, 10), hi = lo;
        int width = (int)(end - digits); /* "001" keeps its zeros */
        r = end;
        if (*r == '-') {
          r++;
          if (*r < '0' || *r > '9') return fail(list, "expected a number after '-'");
          hi = strtol(r, &end, 10);
          r = end;
        }
        if (r < rend && *r != ',') return fail(list, "unexpected character in brackets");
        if (r < rend) r++;
        if (hi < lo) return fail(list, "range ends before it begins");
        if (hi - lo >= 1000000 || count > 1000000)
          return fail(list, "more than a million hosts");
        if (want >= count && want <= count + (hi - lo)) {
          char num[32];
          snprintf(num, sizeof num, "%0*ld", width, lo + (want - count));
          int nlen = (int)strlen(num);
          if (plen + nlen + slen >= cap) return fail(list, "host name too long");
          memcpy(out, pre, (size_t)plen);
          memcpy(out + plen, num, (size_t)nlen);
          memcpy(out + plen + nlen, suf, (size_t)slen);
          out[plen + nlen + slen] = '\0';
        }
        count += (int)(hi - lo + 1);
      }
      if (ranges == rend) return fail(list, "empty brackets");
    }
    if (*p == ',') {
      p++;
      if (!*p) return fail(list, "empty host name");
    }
  }
  if (count == 0) return fail(list, "no host");
  return count;
}

DL_HIDDEN int nodelist_count(const char *list) {
  return nodelist_walk(list, -1, NULL, 0);
}

DL_HIDDEN int nodelist_host(char *out, int cap, const char *list, int index) {
  if (!out || cap <= 0) return fail(list ? list : "(null)", "no room for the host name");
  int n = nodelist_walk(list, index, out, cap);
  if (n < 0) return n;
  if (index < 0 || index >= n) {
    snprintf(last_error, sizeof last_error,
             "host index %d out of range (the node list names %d hosts)", index, n);
    return -1;
  }
  return 0;
}

DL_HIDDEN const char *nodelist_error(void) { return last_error; }

int dl_slurm_nodelist_host(char *out, int cap, const char *list, int index) {
  if (nodelist_host(out, cap, list, index) != 0) return dl_err(EM_BADVALUE, "nodelist", nodelist_error());
  return 0;
}
