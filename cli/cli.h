/* cli.h -- what the ddplua program's files (main.c, repl.c, launcher.c, nodelist.c) share. */
#ifndef DDPLUA_CLI_H
#define DDPLUA_CLI_H

#include <poll.h>
#include <stddef.h>

#include <lua.h>

/* The name every message of the program starts with ("ddplua: ..."). */
#define CLI_NAME "ddplua"

/* Calls the function below narg arguments on the stack in protected mode,
** with a traceback added to errors and Ctrl-C turned into an "interrupted!"
** error; returns the lua_pcall status (the error message is left on top). */
int cli_docall(lua_State *L, int narg, int nres);
/* Prints the error on top of the stack (if status is not 0) and pops it. */
int cli_report(lua_State *L, int status);
/* Prints "ddplua: msg" on stderr. */
void cli_message(const char *msg);

/* -- repl.c: the terminal's prompt. */

/* Runs the interactive prompt until end of input; returns the exit status. */
int repl_run(lua_State *L);
/* The prompt of one process over the ddp.console session at stack index
** session (ddp.breakpoint without a launcher). */
int repl_run_session(lua_State *L, int session);

/* What reading a line can end in, besides a line (0). */
enum { REPL_EOF = -1, REPL_INTR = -2 };

/* What the launcher's prompt adds to the terminal: descriptors to watch
** while waiting for keys (fill writes up to max, returns how many; ready
** gets them back after poll), and Tab's candidates for the text before the
** cursor (a NULL-ended malloc'd array of malloc'd strings, or NULL). */
typedef struct repl_hooks {
  int (*fill)(void *ud, struct pollfd *fds, int max);
  int (*ready)(void *ud, const struct pollfd *fds, int n); /* 1: end the input */
  char **(*complete)(void *ud, const char *upto);
  void *ud;
} repl_hooks;

void repl_term_open(const repl_hooks *hooks);
/* 1 when stdin is a terminal of which this process is not in the
** foreground (under `timeout` without --foreground, started with &):
** reading it would stop the process (SIGTTIN), so no prompt can work. */
int repl_term_background(void);
/* The words a prompt that cannot open says after "ddplua: " and its
** subject: why, and the fix. */
#define REPL_BACKGROUND_WHY \
  "ddplua is not the terminal's foreground process (run under `timeout` without --foreground, or " \
  "started with &), so no prompt can read the keys; `timeout --foreground` or `fg` keeps the terminal"
void repl_term_close(void);
int repl_term_read(const char *prompt, char **out);
void repl_term_redisplay(void);
/* 1 when text is a whole chunk, 0 when it needs more lines. */
int repl_chunk_complete(lua_State *L, const char *text);
/* Reads a whole chunk (continuation lines included) into *chunk. */
int repl_read_chunk(lua_State *L, const char *prompt, const char *prompt2, char **chunk);

/* -- link.c: the control channel between the launcher and its workers. */

/* A frame: "KIND SEQ LEN\n" and LEN bytes. */
typedef struct frame {
  char kind[16];
  long seq;
  const char *payload;
  size_t len;
} frame;
/* The largest payload a frame carries (a reply past it is refused by the
** worker, by name, before it is sent). */
enum { FRAME_MAX = 1 << 30 };
int frame_write(int fd, const char *kind, long seq, const char *payload, size_t len);
/* Parses a frame at the start of buf: its size, 0 if incomplete, -1 if bad. */
int frame_parse(const char *buf, size_t len, frame *f);

/* The worker's end: taken from DDPLUA_CTRL at start; 1 if there is one. */
int link_open(void);
int link_active(void);
/* 1 while the launcher's prompt runs chunks here (cli/link.c). */
int link_in_prompt(void);
/* Loads the script the launcher read from stdin (`ddplua --nproc N -`). */
int link_load_script(lua_State *L);
/* -i under a launcher: serves the launcher's prompt until it says quit. */
int link_serve_repl(lua_State *L);
/* Adds prompt() to package.loaded["ddp.program"] (ddp.breakpoint). */
void link_register(lua_State *L);

/* The launcher's options, as typed (launcher.c checks them); NULL or 0 when
** not given.  main.c fills it from the options before the script. */
typedef struct launch_opts {
  const char *nproc;       /* a count or "auto" */
  const char *nnodes;
  const char *node_rank;
  const char *master_addr;
  const char *master_port;
  const char *log_dir;
  const char *grace;        /* seconds between SIGTERM and SIGKILL */
  const char *max_restarts;
  const char *signals;      /* which signals mean "save and stop" */
  const char *save_grace;   /* seconds the workers get to save */
  int no_prefix, quiet_ranks, bind_cores;
  int dump_on_exit; /* --dump-on-exit */
  const char *trace_dir; /* --trace DIR */
  int trace_ops;         /* --trace-ops */
  int interactive;  /* the prompt over all ranks (no script, or -i) */
  int stdin_script; /* the script is the launcher's stdin ("-", or a pipe) */
} launch_opts;

/* Runs `argv` (argv[0] the program as typed, then the Lua options, the
** script and its arguments; NULL-terminated) as the job's local workers and
** waits for them; returns the exit status for the program. */
int launcher_run(const launch_opts *o, char **argv);
/* `ddplua doctor [launcher options]`: prints what such a launch would get
** and what is wrong (cli/preflight.c); returns the exit status. */
int launcher_doctor(const launch_opts *o);
/* `ddplua analyze DIR [--entries N]` (cli/flight.c): argv after "analyze". */
int flight_analyze(int argc, char **argv);
/* `ddplua trace DIR [--world N]` (cli/trace.c): argv after "trace". */
int trace_command(int argc, char **argv);

#endif
