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


/* The terminal, shared by the prompt of one process and the launcher's
** prompt over ranks (repl_dist.c). */
static struct {
  int open;
  int tty;  /* stdin is a terminal: libedit; else plain reads (-i) */
  char history[PATH_MAX];
  const repl_hooks *hooks;
  struct sigaction old_sigint;
} term;

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
  enum { EXTRA = 64 };
  struct pollfd fds[2 + EXTRA];
  for (;;) {
    if (repl_sigint)
      return -1;
    fds[0] = (struct pollfd){STDIN_FILENO, POLLIN, 0};
    fds[1] = (struct pollfd){repl_pipe[0], POLLIN, 0};
    int extra = term.hooks && term.hooks->fill ? term.hooks->fill(term.hooks->ud, fds + 2, EXTRA) : 0;
    if (poll(fds, (nfds_t)(2 + extra), -1) < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    if (repl_sigint || (fds[1].revents & POLLIN))
      return -1;
    if (extra > 0)
      for (int k = 0; k < extra; k++)
        if (fds[2 + k].revents) {
          if (term.hooks->ready(term.hooks->ud, fds + 2, extra))
            return -1; /* the prompt is over (every rank gone) */
          break;
        }
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


/* -- Reading lines and chunks ---------------------------------------------- */

/* One line without its newline into *out (malloc'd): 0, REPL_EOF or
** REPL_INTR. */
int repl_term_read(const char *prompt, char **out) {
  *out = NULL;
  if (!term.tty) { /* -i with a pipe: no editing, but the same prompts */
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

/* Redraws the prompt and the line being typed after output printed over
** it (a rank's message while the prompt waits). */
void repl_term_redisplay(void) {
  if (term.tty)
    rl_forced_update_display();
}

static void repl_saveline(const char *line) {
  if (!term.tty || line[0] == '\0')
    return;
  add_history(line);
  /* Written at every line, so os.exit() and a crash keep it; a failure
  ** (no HOME, read-only home) only loses the history. */
  if (term.history[0])
    write_history(term.history);
}

/* Whether text is a whole chunk: it compiles (as an expression or as
** statements) or fails otherwise than by ending too early ("... near
** <eof>", as lua.c tells).  The launcher's prompt asks with a bare state
** (no libraries: only the parser runs).  A leading "@ranks " (the
** launcher's prefix) and "=" are skipped. */
int repl_chunk_complete(lua_State *L, const char *text) {
  static const char eof[] = "'<eof>'";
  if (text[0] == '@')
    text += strcspn(text, " \t\n");
  while (*text == ' ' || *text == '\t')
    text++;
  if (text[0] == '=')
    text++;
  int top = lua_gettop(L);
  const char *code = lua_pushfstring(L, "return %s;", text);
  if (luaL_loadbuffer(L, code, strlen(code), "=stdin") == 0) {
    lua_settop(L, top);
    return 1;
  }
  lua_settop(L, top);
  int status = luaL_loadbuffer(L, text, strlen(text), "=stdin");
  int more = 0;
  if (status == LUA_ERRSYNTAX) {
    size_t len;
    const char *msg = lua_tolstring(L, -1, &len);
    more = msg && len >= sizeof(eof) - 1 && strcmp(msg + len - (sizeof(eof) - 1), eof) == 0;
  }
  lua_settop(L, top);
  return !more;
}

/* Reads a whole chunk into *chunk (malloc'd): a first line, then
** continuation lines while it is incomplete.  0, REPL_EOF or REPL_INTR
** (a Ctrl-C drops what was typed). */
int repl_read_chunk(lua_State *L, const char *prompt, const char *prompt2, char **chunk) {
  char *text;
  *chunk = NULL;
  int status = repl_term_read(prompt, &text);
  if (status != 0)
    return status;
  while (!repl_chunk_complete(L, text)) {
    char *more;
    status = repl_term_read(prompt2, &more);
    if (status != 0) {
      free(text);
      return status;
    }
    size_t a = strlen(text), b = strlen(more);
    char *joined = realloc(text, a + b + 2);
    if (!joined) {
      free(more);
      break;
    }
    text = joined;
    text[a] = '\n';
    memcpy(text + a + 1, more, b + 1);
    free(more);
  }
  repl_saveline(text);
  *chunk = text;
  return 0;
}

/* -- Tab completion ---------------------------------------------------------- */

/* The candidates of the current completion, handed out one by one to
** libedit's generator. */
static char **repl_cands;

static void repl_free_cands(void) {
  if (!repl_cands)
    return;
  for (char **c = repl_cands; *c; c++)
    free(*c);
  free(repl_cands);
  repl_cands = NULL;
}

static char *repl_generate(const char *text, int state) {
  static int next;
  (void)text;
  if (state == 0)
    next = 0;
  if (!repl_cands || !repl_cands[next])
    return NULL;
  return strdup(repl_cands[next++]);
}

static char **repl_attempt(const char *text, int start, int end) {
  (void)start;
  repl_free_cands();
  if (!term.hooks || !term.hooks->complete)
    return NULL;
  char *upto = strndup(rl_line_buffer, (size_t)end);
  if (!upto)
    return NULL;
  repl_cands = term.hooks->complete(term.hooks->ud, upto);
  free(upto);
  rl_completion_append_character = '\0';
  if (!repl_cands || !repl_cands[0])
    return NULL;
  return rl_completion_matches(text, repl_generate);
}

/* -- The terminal -------------------------------------------------------- */

int repl_term_background(void) {
  if (!isatty(STDIN_FILENO)) return 0;
  pid_t fg = tcgetpgrp(STDIN_FILENO);
  return fg > 0 && fg != getpgrp();
}

void repl_term_open(const repl_hooks *hooks) {
  struct sigaction act;
  memset(&term, 0, sizeof term);
  term.open = 1;
  term.hooks = hooks;
  term.tty = isatty(STDIN_FILENO);
  if (term.tty) {
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
    /* "x:ad" and "ddp.nn.Li" are one word to complete */
    rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{(,+-*/%^~#[]";
    rl_completer_word_break_characters = (char *)rl_basic_word_break_characters;
    rl_attempted_completion_function = repl_attempt;
    using_history();
    stifle_history(REPL_HISTORY_MAX);
    if (home && home[0] &&
        snprintf(term.history, sizeof(term.history), "%s/%s", home, REPL_HISTORY_FILE) <
            (int)sizeof(term.history))
      read_history(term.history); /* none yet is fine */
    else
      term.history[0] = '\0';
  }
  memset(&act, 0, sizeof(act));
  act.sa_handler = repl_on_sigint;
  sigemptyset(&act.sa_mask);
  sigaction(SIGINT, &act, &term.old_sigint);
}

void repl_term_close(void) {
  if (!term.open)
    return;
  sigaction(SIGINT, &term.old_sigint, NULL);
  for (int i = 0; i < 2; i++) {
    if (repl_pipe[i] >= 0)
      close(repl_pipe[i]);
    repl_pipe[i] = -1;
  }
  repl_free_cands();
  term.open = 0;
}

/* -- One process's prompt ---------------------------------------------------- */

/* The Lua state and session (a ddp.console session at a stack index) the
** completion hook of one process's prompt asks. */
static lua_State *repl_L;
static int repl_session;

static char **repl_complete_local(void *ud, const char *upto) {
  lua_State *L = repl_L;
  (void)ud;
  int top = lua_gettop(L);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "ddp.console");
  if (lua_pcall(L, 1, 1, 0) != 0) {
    lua_settop(L, top);
    return NULL;
  }
  lua_getfield(L, -1, "complete");
  lua_pushvalue(L, repl_session);
  lua_pushstring(L, upto);
  if (lua_pcall(L, 2, 1, 0) != 0 || !lua_istable(L, -1)) {
    lua_settop(L, top);
    return NULL;
  }
  int n = (int)lua_objlen(L, -1);
  char **out = calloc((size_t)n + 1, sizeof *out);
  for (int i = 0; out && i < n; i++) {
    lua_rawgeti(L, -1, i + 1);
    const char *s = lua_tostring(L, -1);
    out[i] = strdup(s ? s : "");
    lua_pop(L, 1);
  }
  lua_settop(L, top);
  return out;
}

/* Runs one chunk through ddp.console.run(session, text) and prints what
** it returns: values on stdout, an error on stderr. */
static void repl_run_chunk(lua_State *L, int session, const char *text) {
  int top = lua_gettop(L);
  if (lua_isnil(L, session)) { /* no ddp.console: plain Lua, as lua.c */
    const char *code = lua_pushfstring(L, "return %s;", text[0] == '=' ? text + 1 : text);
    int status = luaL_loadbuffer(L, code, strlen(code), "=stdin");
    if (status != 0) {
      lua_pop(L, 1);
      status = luaL_loadbuffer(L, text, strlen(text), "=stdin");
    }
    if (status == 0)
      status = cli_docall(L, 0, LUA_MULTRET);
    if (status == 0 && lua_gettop(L) > top + 1) {
      lua_getglobal(L, "print");
      lua_replace(L, top + 1);
      status = lua_pcall(L, lua_gettop(L) - top - 1, 0, 0);
    }
    cli_report(L, status);
    lua_settop(L, top);
    return;
  }
  lua_getglobal(L, "require");
  lua_pushliteral(L, "ddp.console");
  int status = cli_docall(L, 1, 1);
  if (status == 0) {
    lua_getfield(L, -1, "run");
    lua_pushvalue(L, session);
    lua_pushstring(L, text);
    status = cli_docall(L, 2, 2);
  }
  if (status != 0) {
    cli_report(L, status);
  } else {
    size_t len;
    const char *out = lua_tolstring(L, -1, &len);
    if (out && !lua_toboolean(L, -2)) {
      cli_message(out);
    } else if (out && len > 0) {
      fwrite(out, 1, len, stdout);
      fputc('\n', stdout);
      fflush(stdout);
    }
  }
  lua_settop(L, top);
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

/* The prompt of one process until end of input, running chunks in the
** ddp.console session at stack index session. */
int repl_run_session(lua_State *L, int session) {
  repl_hooks hooks = {NULL, NULL, repl_complete_local, NULL};
  lua_State *saved_L = repl_L;
  int saved_session = repl_session;
  int was_open = term.open;
  if (!was_open && repl_term_background()) {
    fprintf(stderr, "%s: the prompt does not open: %s\n", CLI_NAME, REPL_BACKGROUND_WHY);
    fflush(stderr);
    return 0;
  }
  repl_L = L;
  repl_session = session > 0 ? session : lua_gettop(L) + session + 1;
  if (!was_open)
    repl_term_open(&hooks);
  for (;;) {
    char *chunk;
    int status = repl_read_chunk(L, REPL_PROMPT, REPL_PROMPT2, &chunk);
    if (status == REPL_EOF)
      break;
    if (status == REPL_INTR) { /* drop the line (and any pending ones) */
      fputs("\n", stdout);
      fflush(stdout);
      continue;
    }
    repl_run_chunk(L, repl_session, chunk);
    free(chunk);
    fflush(stdout);
  }
  fputs("\n", stdout);
  fflush(stdout);
  if (!was_open)
    repl_term_close();
  repl_L = saved_L;
  repl_session = saved_session;
  return 0;
}

int repl_run(lua_State *L) {
  int base = lua_gettop(L);
  int have_ddp = repl_load_ddp(L);
  printf("%s %s -- LuaJIT data-parallel training.%s Ctrl-D to exit.\n",
         CLI_NAME, dl_version(), have_ddp ? " ddp is loaded;" : "");
  fflush(stdout);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "ddp.console");
  if (cli_docall(L, 1, 1) == 0) {
    lua_getfield(L, -1, "session");
    lua_remove(L, -2);
    if (cli_docall(L, 0, 1) == 0) {
      repl_run_session(L, lua_gettop(L));
      lua_settop(L, base);
      return 0;
    }
  }
  cli_report(L, 1);
  lua_settop(L, base);
  lua_pushnil(L); /* the prompt still works, without ddp's console */
  repl_run_session(L, lua_gettop(L));
  lua_settop(L, base);
  return 0;
}
