/* repl.c -- the interactive ddplua prompt: line editing, Ctrl-C, printing results. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>

#include <editline/readline.h>

#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>

#include "cli.h"
#include "ddplua.h"

#define REPL_PROMPT "> "
#define REPL_PROMPT2 ">> "
#define REPL_HISTORY_FILE ".ddplua_history"
#define REPL_HISTORY_MAX 1000

/* What reading a line can end in, besides a line (0). */
enum { REPL_EOF = -1, REPL_INTR = -2 };

typedef struct repl {
  int tty;       /* stdin is a terminal: libedit; else plain reads (-i) */
  int base;      /* stack slots below ours */
  char history[PATH_MAX];
} repl;

/* -- Ctrl-C at the prompt ------------------------------------------------ */

/* The handler only sets a flag and writes to a pipe: the poll in repl_getc
** wakes on the pipe, so a Ctrl-C cannot slip in between testing the flag
** and blocking in read (libedit itself retries a read cut by EINTR once). */
static volatile sig_atomic_t repl_sigint;
static int repl_pipe[2] = {-1, -1};

static void repl_on_sigint(int sig) {
  int saved = errno;
  (void)sig;
  repl_sigint = 1;
  if (repl_pipe[1] >= 0 && write(repl_pipe[1], "", 1) < 0) {
    /* full pipe: the flag is enough */
  }
  errno = saved;
}

static void repl_clear_sigint(void) {
  char buf[64];
  if (repl_pipe[0] >= 0)
    while (read(repl_pipe[0], buf, sizeof(buf)) > 0) {
    }
  repl_sigint = 0;
}

/* One byte of stdin, or -1 at end of input or on Ctrl-C. */
static int repl_getbyte(void) {
  struct pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {repl_pipe[0], POLLIN, 0}};
  for (;;) {
    if (repl_sigint)
      return -1;
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    if (repl_sigint || (fds[1].revents & POLLIN))
      return -1;
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      unsigned char c;
      ssize_t n = read(STDIN_FILENO, &c, 1);
      if (n == 1)
        return c;
      if (n < 0 && (errno == EINTR || errno == EAGAIN))
        continue;
      return -1;
    }
  }
}

/* libedit's rl_getc_function: a whole character, decoded from the locale's
** multibyte form, since libedit stores the value it gets as one wchar_t.
** Ending the input (EOF) makes readline() return NULL; repl_sigint tells a
** Ctrl-C from a Ctrl-D. */
static int repl_getc(FILE *unused) {
  char buf[MB_LEN_MAX];
  size_t n = 0;
  (void)unused;
  for (;;) {
    int c = repl_getbyte();
    if (c < 0)
      return EOF;
    buf[n++] = (char)c;
    if (n == 1 && c < 0x80)
      return c;
    mbstate_t st;
    wchar_t wc;
    memset(&st, 0, sizeof(st));
    size_t r = mbrtowc(&wc, buf, n, &st);
    if (r == (size_t)-2 && n < sizeof(buf))
      continue; /* an incomplete sequence: read on */
    if (r == (size_t)-1 || r == (size_t)-2)
      return (unsigned char)buf[0]; /* not in this locale: pass the byte */
    return (int)wc;
  }
}

/* -- Reading lines ------------------------------------------------------- */

/* Reads one line without its newline into *out (malloc'd); returns 0,
** REPL_EOF or REPL_INTR. */
static int repl_read(repl *r, const char *prompt, char **out) {
  *out = NULL;
  if (!r->tty) { /* -i with a pipe: no editing, but the same prompts */
    size_t cap = 0;
    fputs(prompt, stdout);
    fflush(stdout);
    repl_sigint = 0;
    ssize_t n = getline(out, &cap, stdin);
    if (n < 0) {
      free(*out);
      *out = NULL;
      if (!repl_sigint)
        return REPL_EOF;
      clearerr(stdin);
      return REPL_INTR;
    }
    if (n > 0 && (*out)[n - 1] == '\n')
      (*out)[n - 1] = '\0';
    return 0;
  }
  repl_clear_sigint();
  *out = readline(prompt);
  if (*out == NULL)
    return repl_sigint ? REPL_INTR : REPL_EOF;
  return 0;
}

static void repl_saveline(repl *r, const char *line) {
  if (!r->tty || line[0] == '\0')
    return;
  add_history(line);
  /* Written at every line, so os.exit() and a crash keep it; a failure
  ** (no HOME, read-only home) only loses the history. */
  if (r->history[0])
    write_history(r->history);
}

/* Pushes the next line: 0, or REPL_EOF / REPL_INTR with nothing pushed.
** "=expr" on a first line means "return expr", as in Lua 5.1. */
static int repl_pushline(repl *r, lua_State *L, int first) {
  char *line;
  int status = repl_read(r, first ? REPL_PROMPT : REPL_PROMPT2, &line);
  if (status != 0)
    return status;
  if (first && line[0] == '=')
    lua_pushfstring(L, "return %s", line + 1);
  else
    lua_pushstring(L, line);
  free(line);
  return 0;
}

/* A syntax error at the very end of the text means the chunk goes on in
** the next line; lua.c tells it by the message ending in '<eof>'. */
static int repl_incomplete(lua_State *L, int status) {
  static const char eof[] = "'<eof>'";
  if (status == LUA_ERRSYNTAX) {
    size_t len;
    const char *msg = lua_tolstring(L, -1, &len);
    if (len >= sizeof(eof) - 1 &&
        strcmp(msg + len - (sizeof(eof) - 1), eof) == 0) {
      lua_pop(L, 1);
      return 1;
    }
  }
  return 0;
}

/* Tries the line as "return <line>" so that expressions print their value;
** on success the compiled function replaces the "return" text.  The values
** pass through an identity function so that a call in the line is not a
** tail call: one would take the chunk's frame off the stack, and an error
** in the library could then not name stdin:1 (ddp.core picks the first
** frame outside the library).  The newline ends a trailing comment. */
static int repl_addreturn(repl *r, lua_State *L) {
  const char *line = lua_tostring(L, -1);
  const char *code =
      lua_pushfstring(L, "return (function(...) return ... end)(%s\n)", line);
  int status = luaL_loadbuffer(L, code, strlen(code), "=stdin");
  if (status == 0) {
    lua_remove(L, -2);
    repl_saveline(r, line);
  } else {
    lua_pop(L, 2);
  }
  return status;
}

/* Reads continuation lines until the chunk compiles or fails otherwise. */
static int repl_multiline(repl *r, lua_State *L) {
  for (;;) {
    size_t len;
    const char *code = lua_tolstring(L, r->base + 1, &len);
    int status = luaL_loadbuffer(L, code, len, "=stdin");
    if (!repl_incomplete(L, status)) {
      repl_saveline(r, code);
      return status;
    }
    status = repl_pushline(r, L, 0);
    if (status != 0)
      return status;
    lua_pushliteral(L, "\n");
    lua_insert(L, -2);
    lua_concat(L, 3);
  }
}

/* Leaves the compiled chunk (status 0) or an error message on the stack;
** REPL_EOF / REPL_INTR leave nothing. */
static int repl_loadline(repl *r, lua_State *L) {
  lua_settop(L, r->base);
  int status = repl_pushline(r, L, 1);
  if (status != 0)
    return status;
  status = repl_addreturn(r, L);
  if (status != 0)
    status = repl_multiline(r, L);
  if (status < 0) {
    lua_settop(L, r->base);
    return status;
  }
  lua_remove(L, r->base + 1); /* the text */
  return status;
}

/* -- Running ------------------------------------------------------------- */

/* Prints what the chunk returned through the global print (so tostring and
** __tostring apply, tab separated). */
static void repl_print(repl *r, lua_State *L) {
  int n = lua_gettop(L) - r->base;
  if (n <= 0)
    return;
  if (!lua_checkstack(L, LUA_MINSTACK)) {
    cli_message("too many results to print");
    return;
  }
  lua_getglobal(L, "print");
  lua_insert(L, r->base + 1);
  if (lua_pcall(L, n, 0, 0) != 0)
    cli_message(lua_pushfstring(L, "error calling 'print' (%s)",
                                lua_tostring(L, -1)));
}

static int repl_run_chunk(repl *r, lua_State *L) {
  /* JIT-compiled loops never run debug hooks, so a `while true do end`
  ** typed here could not be stopped by Ctrl-C: code typed at the prompt
  ** runs interpreted.  Functions it calls from modules keep the JIT. */
  luaJIT_setmode(L, -1, LUAJIT_MODE_ALLFUNC | LUAJIT_MODE_OFF);
  int status = cli_docall(L, 0, LUA_MULTRET);
  if (status == 0)
    repl_print(r, L);
  return cli_report(L, status);
}

/* ddp = require "ddp"; returns 1 if it loaded.  A broken ddp must not take
** the prompt away, so a failure is only a warning. */
static int repl_load_ddp(lua_State *L) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "ddp");
  if (lua_pcall(L, 1, 1, 0) != 0) {
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "%s: warning: cannot load ddp: %s\n", CLI_NAME,
            msg ? msg : "(error object is not a string)");
    fflush(stderr);
    lua_pop(L, 1);
    return 0;
  }
  lua_setglobal(L, "ddp");
  return 1;
}

static void repl_setup_editing(repl *r) {
  const char *home = getenv("HOME");
  /* libedit needs the locale's character set to edit non-ASCII text;
  ** LC_CTYPE alone leaves number formatting (LC_NUMERIC) to Lua. */
  setlocale(LC_CTYPE, "");
  if (pipe(repl_pipe) == 0) {
    for (int i = 0; i < 2; i++) {
      fcntl(repl_pipe[i], F_SETFL, O_NONBLOCK);
      fcntl(repl_pipe[i], F_SETFD, FD_CLOEXEC);
    }
  } else {
    repl_pipe[0] = repl_pipe[1] = -1;
  }
  rl_readline_name = "ddplua";
  rl_getc_function = repl_getc; /* before libedit initialises */
  using_history();
  stifle_history(REPL_HISTORY_MAX);
  r->history[0] = '\0';
  if (home && home[0] &&
      snprintf(r->history, sizeof(r->history), "%s/%s", home,
               REPL_HISTORY_FILE) < (int)sizeof(r->history))
    read_history(r->history); /* none yet is fine */
  else
    r->history[0] = '\0';
}

int repl_run(lua_State *L) {
  repl r;
  struct sigaction act, old;
  memset(&r, 0, sizeof(r));
  r.tty = isatty(STDIN_FILENO);
  r.base = lua_gettop(L);
  if (r.tty)
    repl_setup_editing(&r);

  memset(&act, 0, sizeof(act));
  act.sa_handler = repl_on_sigint;
  sigemptyset(&act.sa_mask);
  sigaction(SIGINT, &act, &old);

  int have_ddp = repl_load_ddp(L);
  printf("%s %s -- LuaJIT data-parallel training.%s Ctrl-D to exit.\n",
         CLI_NAME, dl_version(), have_ddp ? " ddp is loaded;" : "");
  fflush(stdout);

  for (;;) {
    int status = repl_loadline(&r, L);
    if (status == REPL_EOF)
      break;
    if (status == REPL_INTR) { /* drop the line (and any pending ones) */
      fputs("\n", stdout);
      fflush(stdout);
      continue;
    }
    if (status == 0)
      repl_run_chunk(&r, L);
    else
      cli_report(L, status);
    fflush(stdout);
  }
  lua_settop(L, r.base);
  fputs("\n", stdout);
  fflush(stdout);

  sigaction(SIGINT, &old, NULL);
  for (int i = 0; i < 2; i++) {
    if (repl_pipe[i] >= 0)
      close(repl_pipe[i]);
    repl_pipe[i] = -1;
  }
  return 0;
}
