/* cli.h -- what the ddplua program's files (main.c, repl.c, launcher.c, nodelist.c) share. */
#ifndef DDPLUA_CLI_H
#define DDPLUA_CLI_H

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

/* Runs the interactive prompt until end of input; returns the exit status. */
int repl_run(lua_State *L);

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
  int no_prefix, quiet_ranks, bind_cores;
} launch_opts;

/* Runs `argv` (argv[0] the program as typed, then the Lua options, the
** script and its arguments; NULL-terminated) as the job's local workers and
** waits for them; returns the exit status for the program. */
int launcher_run(const launch_opts *o, char **argv);

/* -- nodelist.c: SLURM's compressed host lists, as in SLURM_JOB_NODELIST:
** "gpu[001-004,010],cpu7" names gpu001..gpu004, gpu010 and cpu7 (zero
** padding kept). */

/* The number of hosts, or -1 when the list is malformed. */
int nodelist_count(const char *list);
/* Writes host number index (0-based) of list to out (cap bytes, NUL
** included); -1 when the list is malformed, index is out of range or the
** name does not fit. */
int nodelist_host(char *out, int cap, const char *list, int index);
/* What the last failing call found wrong ("bad node list ...: why"). */
const char *nodelist_error(void);

#endif
