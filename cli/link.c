/* link.c -- a launched worker's control channel to its launcher: the frames both ends speak, and the worker's side of the prompt over ranks. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>

#include "cli.h"
#include "ddplua.h"

/* -- Frames ------------------------------------------------------------------ */

/* A frame is a header line "KIND SEQ LEN\n" and LEN bytes of payload: text
** of any content (chunks, outputs) needs no escaping that way. */
int frame_write(int fd, const char *kind, long seq, const char *payload, size_t len) {
  char head[96];
  int n = snprintf(head, sizeof head, "%s %ld %zu\n", kind, seq, len);
  if (n <= 0 || (size_t)n >= sizeof head) return -1;
  const char *parts[2] = {head, payload};
  size_t lens[2] = {(size_t)n, len};
  for (int p = 0; p < 2; p++) {
    const char *b = parts[p];
    size_t left = lens[p];
    while (left > 0) {
      ssize_t w = write(fd, b, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return -1;
      b += w;
      left -= (size_t)w;
    }
  }
  return 0;
}

/* The header at the start of buf into f (payload not set): its length
** with the newline, 0 if incomplete, -1 if malformed. */
static int frame_head(const char *buf, size_t len, frame *f) {
  const char *nl = memchr(buf, '\n', len < 128 ? len : 128);
  if (!nl) return len >= 128 ? -1 : 0;
  char head[128];
  memcpy(head, buf, (size_t)(nl - buf));
  head[nl - buf] = '\0';
  char *end;
  char *sp = strchr(head, ' ');
  if (!sp || sp == head || (size_t)(sp - head) >= sizeof f->kind) return -1;
  memcpy(f->kind, head, (size_t)(sp - head));
  f->kind[sp - head] = '\0';
  f->seq = strtol(sp + 1, &end, 10);
  if (end == sp + 1 || *end != ' ') return -1;
  char *lenp = end + 1;
  unsigned long long plen = strtoull(lenp, &end, 10);
  if (end == lenp || *end || plen > FRAME_MAX) return -1;
  f->len = (size_t)plen;
  f->payload = NULL;
  return (int)(nl - buf) + 1;
}

int frame_parse(const char *buf, size_t len, frame *f) {
  int head = frame_head(buf, len, f);
  if (head <= 0) return head;
  if (len < (size_t)head + f->len) return 0;
  f->payload = buf + head;
  return head + (int)f->len;
}

/* Reads one whole frame from a blocking fd; the payload is malloc'd (NUL
** ended) into *payload.  0, or -1 at end of file or on an error. */
static int frame_read(int fd, frame *f, char **payload) {
  char head[128];
  size_t n = 0;
  *payload = NULL;
  while (n < sizeof head - 1) {
    ssize_t r = read(fd, head + n, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    if (head[n++] == '\n') break;
  }
  if (head[n - 1] != '\n' || frame_head(head, n, f) != (int)n) return -1;
  char *p = malloc(f->len + 1);
  if (!p) return -1;
  size_t got = 0;
  while (got < f->len) {
    ssize_t r = read(fd, p + got, f->len - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      free(p);
      return -1;
    }
    got += (size_t)r;
  }
  p[f->len] = '\0';
  f->payload = p;
  *payload = p;
  return 0;
}

/* "812 bytes", "5.0 KiB", "1.5 GiB" */
static const char *human_bytes(char *out, size_t cap, size_t n) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (n < 1024) {
    snprintf(out, cap, "%zu bytes", n);
    return out;
  }
  double v = (double)n / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) v /= 1024, u++;
  snprintf(out, cap, "%.1f %s", v, units[u]);
  return out;
}

/* -- The worker's end ------------------------------------------------------ */

/* The launcher gives every worker two pipe ends in DDPLUA_CTRL="R,W"; the
** variable is removed at once and the descriptors closed on exec, so a
** program the script starts is no worker of ours. */
static int link_rfd = -1, link_wfd = -1;

int link_open(void) {
  const char *v = getenv("DDPLUA_CTRL");
  if (!v || !*v) return 0;
  int r = -1, w = -1;
  if (sscanf(v, "%d,%d", &r, &w) == 2 && r >= 0 && w >= 0 && fcntl(r, F_GETFD) >= 0 &&
      fcntl(w, F_GETFD) >= 0) {
    fcntl(r, F_SETFD, FD_CLOEXEC);
    fcntl(w, F_SETFD, FD_CLOEXEC);
    link_rfd = r;
    link_wfd = w;
  }
  unsetenv("DDPLUA_CTRL");
  return link_rfd >= 0;
}

int link_active(void) { return link_rfd >= 0; }

/* While the launcher's prompt drives this rank (link_serve). */
static int link_serving;
int link_in_prompt(void) { return link_serving; }

/* The script the launcher read from its stdin (`ddplua --nproc N -`),
** loaded as "=stdin"; the load status as luaL_loadbuffer's. */
int link_load_script(lua_State *L) {
  frame f;
  char *p;
  if (frame_read(link_rfd, &f, &p) != 0 || strcmp(f.kind, "script") != 0) {
    free(p);
    lua_pushliteral(L, "cannot read the script from the launcher (stdin)");
    return LUA_ERRFILE;
  }
  int status = luaL_loadbuffer(L, p, f.len, "=stdin");
  free(p);
  return status;
}

/* Between chunks a Ctrl-C the launcher passes on may arrive late, after
** this rank finished: it must not kill the rank, so SIGINT is caught here
** and dropped; cli_docall arms its own handler for the chunk itself. */
static void link_on_sigint(int sig) { (void)sig; }

/* Calls console[fn](session, text) under cli_docall (so Ctrl-C can stop
** it); returns the Lua status, the results on the stack. */
static int link_call(lua_State *L, int console, int session, const char *fn, const char *text,
                     size_t len, int nres) {
  lua_getfield(L, console, fn);
  lua_pushvalue(L, session);
  lua_pushlstring(L, text, len);
  return cli_docall(L, 2, nres);
}

/* Runs the launcher's requests in session (a ddp.console session) until it
** says "continue" (or goes away): chunks ("run"), Tab completions
** ("complete").  first: the frame announcing us ("ready", "bp").  Returns 0,
** or -1 when the launcher is gone. */
static int link_serve(lua_State *L, int session, const char *first, long seq, const char *note) {
  int top = lua_gettop(L);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "ddp.console");
  if (lua_pcall(L, 1, 1, 0) != 0) {
    cli_report(L, 1);
    lua_pushnil(L); /* requests then fail one by one, with the reason */
  }
  int console = lua_gettop(L);
  struct sigaction act, old;
  memset(&act, 0, sizeof act);
  act.sa_handler = link_on_sigint;
  sigemptyset(&act.sa_mask);
  sigaction(SIGINT, &act, &old);
  int rc = -1;
  link_serving = 1;
  fflush(stdout);
  fflush(stderr);
  if (frame_write(link_wfd, first, seq, note, strlen(note)) != 0) goto out;
  for (;;) {
    frame f;
    char *p;
    if (frame_read(link_rfd, &f, &p) != 0) goto out;
    if (strcmp(f.kind, "continue") == 0 || strcmp(f.kind, "quit") == 0) {
      free(p);
      rc = 0;
      goto out;
    }
    /* "runf": a chunk for some ranks only, after the fence's text and a
    ** newline (cli/repl_dist.c): its collectives fail at once, naming why */
    int fence = strcmp(f.kind, "runf") == 0, is_run = fence || strcmp(f.kind, "run") == 0;
    if (!is_run && strcmp(f.kind, "complete") != 0) {
      free(p);
      continue;
    }
    const char *text = p;
    size_t tlen = f.len;
    if (fence) {
      char *nl = memchr(p, '\n', f.len);
      if (nl) {
        *nl = '\0';
        dl_pg_set_fence(p);
        text = nl + 1;
        tlen = f.len - (size_t)(nl + 1 - p);
      }
    }
    int status = lua_isnil(L, console) ? (lua_pushliteral(L, "ddp.console did not load"), 1)
                 : link_call(L, console, session, is_run ? "run" : "complete_text", text, tlen, 2);
    if (fence) dl_pg_set_fence(NULL);
    free(p);
    int ok = 0;
    size_t len = 0;
    const char *out;
    if (status != 0) { /* the console itself failed (or a Ctrl-C hit it) */
      out = lua_tolstring(L, -1, &len);
    } else {
      ok = lua_toboolean(L, -2);
      out = lua_tolstring(L, -1, &len);
    }
    if (!out) out = "", len = 0;
    /* a result past what a frame carries: refused here, by name (the
    ** launcher would see a garbled frame and turn this rank's prompt off) */
    char big[300];
    const char *max_env = getenv("DDPLUA_PROMPT_REPLY_MAX");  /* for tests */
    size_t max = max_env && atoll(max_env) > 0 ? (size_t)atoll(max_env) : FRAME_MAX;
    if (len > max) {
      char a[32], b[32];
      snprintf(big, sizeof big,
               "the result is %s of text, more than the prompt carries (%s); show a part of it "
               "(x:narrow(0, 0, 10), s:sub(1, 1000)) or write it to a file",
               human_bytes(a, sizeof a, len), human_bytes(b, sizeof b, max));
      out = big, len = strlen(big), ok = 0, status = 0;
    }
    fflush(stdout); /* what the chunk printed reaches the launcher first */
    fflush(stderr);
    if (frame_write(link_wfd, is_run ? (ok ? "ok" : "error") : "completion", f.seq, out, len) != 0) {
      lua_settop(L, top);
      goto out;
    }
    lua_settop(L, console);
  }
out:
  link_serving = 0;
  sigaction(SIGINT, &old, NULL);
  lua_settop(L, top);
  return rc;
}

/* `ddplua --nproc N` (no script, or -i): the prompt's chunks run here,
** in a fresh session, until the launcher says "quit". */
int link_serve_repl(lua_State *L) {
  lua_getglobal(L, "require"); /* ddp, as at the prompt of one process */
  lua_pushliteral(L, "ddp");
  if (cli_docall(L, 1, 1) != 0) return cli_report(L, 1);
  lua_setglobal(L, "ddp");
  lua_getglobal(L, "require");
  lua_pushliteral(L, "ddp.console");
  if (cli_docall(L, 1, 1) != 0) return cli_report(L, 1);
  lua_getfield(L, -1, "session");
  lua_remove(L, -2);
  if (cli_docall(L, 0, 1) != 0) return cli_report(L, 1);
  int rc = link_serve(L, lua_gettop(L), "ready", 0, "");
  lua_pop(L, 1);
  return rc == 0 ? 0 : 1;
}

/* package.loaded["ddp.program"].prompt(session, rank, where), which
** ddp.breakpoint calls: the launcher's prompt on `rank` (the others wait
** for it to end), or without a launcher the terminal's. */
static int link_prompt(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int rank = (int)luaL_checkinteger(L, 2);
  const char *where = luaL_optstring(L, 3, "?");
  lua_settop(L, 3);
  if (!link_active()) {
    const char *me = getenv("RANK");
    if (me && *me && atoi(me) != rank) return 0;
    if (repl_term_background()) {
      fprintf(stderr, "%s: breakpoint at %s passed: %s\n", CLI_NAME, where, REPL_BACKGROUND_WHY);
      fflush(stderr);
      return 0;
    }
    fprintf(stderr, "%s: breakpoint at %s: Ctrl-D continues\n", CLI_NAME, where);
    fflush(stderr);
    repl_run_session(L, 1);
    return 0;
  }
  if (link_serve(L, 1, "bp", rank, where) != 0)
    return luaL_error(L, "breakpoint: the launcher is gone");
  return 0;
}

void link_register(lua_State *L) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "loaded");
  lua_getfield(L, -1, "ddp.program");
  if (lua_istable(L, -1)) {
    lua_pushcfunction(L, link_prompt);
    lua_setfield(L, -2, "prompt");
  }
  lua_pop(L, 3);
}
