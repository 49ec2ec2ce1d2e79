/* main.c -- the ddplua program: options, module paths and scripts, after lua.c. */
#include <cblas.h>
#include <dlfcn.h>
#include <dnnl.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <lualib.h>

#include "cli.h"
#include "ddplua.h"

/* -- Options ------------------------------------------------------------- */

/* One row per option, so that adding one is a row here, a field in
** cli_args and a case in cli_parse.  The launcher's own rows (OPT_NPROC and
** after) are not passed on to the workers. */
enum {
  OPT_EXEC,
  OPT_LIB,
  OPT_INTERACTIVE,
  OPT_VERSION,
  OPT_NOENV,
  OPT_HELP,
  OPT_NPROC,
  OPT_NNODES,
  OPT_NODE_RANK,
  OPT_MASTER_ADDR,
  OPT_MASTER_PORT,
  OPT_LOG_DIR,
  OPT_NO_PREFIX,
  OPT_QUIET_RANKS,
  OPT_GRACE,
  OPT_MAX_RESTARTS,
  OPT_BIND_CORES,
  OPT_SIGNALS,
  OPT_SAVE_GRACE,
  OPT_DUMP_ON_EXIT,
  OPT_TRACE,
  OPT_TRACE_OPS
};

typedef struct cli_option {
  const char *name;    /* as typed: "-e", "--help" */
  const char *argname; /* NULL when the option takes no value */
  int id;
  const char *help;
} cli_option;

static const cli_option cli_options[] = {
  {"-e", "chunk", OPT_EXEC, "execute string 'chunk'"},
  {"-l", "name", OPT_LIB, "require library 'name' into global 'name'"},
  {"-i", NULL, OPT_INTERACTIVE, "enter interactive mode after the script"},
  {"-v", NULL, OPT_VERSION, "show version information"},
  {"-E", NULL, OPT_NOENV, "ignore environment variables (LUA_PATH, ...)"},
  {"-h", NULL, OPT_HELP, "show this help and exit"},
  {"--help", NULL, OPT_HELP, "show this help and exit"},
  {"--nproc", "N", OPT_NPROC, "run N workers of the script (auto: one per GPU)"},
  {"--nnodes", "M", OPT_NNODES, "the job spans M nodes (default 1, or SLURM's)"},
  {"--node-rank", "K", OPT_NODE_RANK, "this node's rank (default 0, or SLURM's)"},
  {"--master-addr", "HOST", OPT_MASTER_ADDR, "host of node 0, serving the store"},
  {"--master-port", "P", OPT_MASTER_PORT, "the store's port (default: a free one)"},
  {"--log-dir", "DIR", OPT_LOG_DIR, "also write each rank's output to DIR/rank<r>.log"},
  {"--dump-on-exit", NULL, OPT_DUMP_ON_EXIT, "write the flight recorder's rings at the end too"},
  {"--trace", "DIR", OPT_TRACE, "record every rank's timeline; DIR/trace.json at the end"},
  {"--trace-ops", NULL, OPT_TRACE_OPS, "with --trace: each C op and autograd node too"},
  {"--no-prefix", NULL, OPT_NO_PREFIX, "do not prefix output lines with [rank]"},
  {"--quiet-ranks", NULL, OPT_QUIET_RANKS, "show only rank 0's output"},
  {"--grace", "S", OPT_GRACE, "seconds from SIGTERM to SIGKILL (default 5)"},
  {"--signals", "LIST", OPT_SIGNALS, "signals meaning save and stop (default TERM,USR1)"},
  {"--save-grace", "S", OPT_SAVE_GRACE, "seconds the workers get to save (default 30)"},
  {"--max-restarts", "K", OPT_MAX_RESTARTS, "restart the workers up to K times"},
  {"--bind-cores", NULL, OPT_BIND_CORES, "pin each worker to its share of the CPUs"},
};

#define CLI_NOPTIONS (sizeof(cli_options) / sizeof(cli_options[0]))

/* -e and -l run in the order given, interleaved. */
typedef struct cli_action {
  int id;
  const char *value;
} cli_action;

typedef struct cli_args {
  int argc;
  char **argv;
  cli_action *actions; /* argc entries at most */
  int nactions;
  int nexec;       /* how many of the actions are -e */
  int script;      /* argv index of the script, 0 when there is none */
  int interactive; /* -i */
  int version;     /* -v */
  int noenv;       /* -E */
  int help;        /* -h, --help */
  int status;      /* the exit status pmain leaves */
  int launch;      /* --nproc or --nnodes: run the launcher */
  launch_opts lo;
  char **wargv;    /* the workers' argv: all but the launcher's options */
  int nwargv;
} cli_args;

void cli_message(const char *msg) {
  fflush(stdout); /* what the script printed comes before its error */
  fprintf(stderr, "%s: %s\n", CLI_NAME, msg);
  fflush(stderr);
}

static void cli_usage(FILE *out) {
  fprintf(out, "usage: %s [options] [script [args]]\n"
               "       %s doctor [launcher options]   check what a launch would get\n"
               "       %s analyze DIR [--entries N]  read the flight recorder's dumps\n"
               "       %s trace DIR [--world N]      merge the ranks' trace files\n"
               "Available options are:\n", CLI_NAME, CLI_NAME, CLI_NAME, CLI_NAME);
  for (size_t i = 0; i < CLI_NOPTIONS; i++) {
    const cli_option *o = &cli_options[i];
    char left[32];
    snprintf(left, sizeof(left), "%s%s%s", o->name, o->argname ? " " : "",
             o->argname ? o->argname : "");
    if (o->id == OPT_NPROC)
      fprintf(out, "Launcher options (ddplua --nproc N script.lua: N workers):\n");
    fprintf(out, "  %-18s %s\n", left, o->help);
  }
  fprintf(out, "  %-18s %s\n", "--", "stop handling options");
  fprintf(out, "  %-18s %s\n", "-", "execute stdin and stop handling options");
  fprintf(out, "Options after the script belong to the script.\n");
  fflush(out);
}

/* Finds the option `arg` names.  A value may be glued on: "-eprint(1)" for
** short options, "--name=value" for long ones; *glued then points at it. */
static const cli_option *cli_find(const char *arg, const char **glued) {
  *glued = NULL;
  for (size_t i = 0; i < CLI_NOPTIONS; i++) {
    const cli_option *o = &cli_options[i];
    size_t n = strlen(o->name);
    if (strncmp(arg, o->name, n) != 0)
      continue;
    if (arg[n] == '\0')
      return o;
    if (o->argname && o->name[1] != '-') {
      *glued = arg + n;
      return o;
    }
    if (o->argname && arg[n] == '=') {
      *glued = arg + n + 1;
      return o;
    }
  }
  return NULL;
}

/* Fills a from argv; returns 0, or -1 after printing what is wrong. */
static int cli_parse(cli_args *a) {
  int i;
  for (i = 1; i < a->argc; i++) {
    const char *arg = a->argv[i];
    const char *value;
    if (arg[0] != '-' || strcmp(arg, "-") == 0)
      break; /* the script (or "-", stdin): the rest are its arguments */
    if (strcmp(arg, "--") == 0) {
      i++;
      break;
    }
    const cli_option *o = cli_find(arg, &value);
    if (o == NULL) {
      char msg[256];
      snprintf(msg, sizeof(msg), "unrecognized option '%.200s'", arg);
      cli_message(msg);
      return -1;
    }
    int first = i;
    if (o->argname && value == NULL) {
      if (i + 1 >= a->argc) {
        char msg[256];
        snprintf(msg, sizeof(msg), "'%s' needs argument", o->name);
        cli_message(msg);
        return -1;
      }
      value = a->argv[++i];
    }
    if (o->id < OPT_NPROC) /* the workers run with the Lua options */
      for (int k = first; k <= i; k++) a->wargv[a->nwargv++] = a->argv[k];
    switch (o->id) {
    case OPT_EXEC:
    case OPT_LIB:
      a->actions[a->nactions].id = o->id;
      a->actions[a->nactions].value = value;
      a->nactions++;
      a->nexec += o->id == OPT_EXEC;
      break;
    case OPT_INTERACTIVE: a->interactive = 1; break;
    case OPT_VERSION: a->version = 1; break;
    case OPT_NOENV: a->noenv = 1; break;
    case OPT_HELP: a->help = 1; break;
    case OPT_NPROC: a->lo.nproc = value; a->launch = 1; break;
    case OPT_NNODES: a->lo.nnodes = value; a->launch = 1; break;
    case OPT_NODE_RANK: a->lo.node_rank = value; break;
    case OPT_MASTER_ADDR: a->lo.master_addr = value; break;
    case OPT_MASTER_PORT: a->lo.master_port = value; break;
    case OPT_LOG_DIR: a->lo.log_dir = value; break;
    case OPT_NO_PREFIX: a->lo.no_prefix = 1; break;
    case OPT_QUIET_RANKS: a->lo.quiet_ranks = 1; break;
    case OPT_GRACE: a->lo.grace = value; break;
    case OPT_MAX_RESTARTS: a->lo.max_restarts = value; break;
    case OPT_BIND_CORES: a->lo.bind_cores = 1; break;
    case OPT_SIGNALS: a->lo.signals = value; break;
    case OPT_SAVE_GRACE: a->lo.save_grace = value; break;
    case OPT_DUMP_ON_EXIT: a->lo.dump_on_exit = 1; break;
    case OPT_TRACE: a->lo.trace_dir = value; break;
    case OPT_TRACE_OPS: a->lo.trace_ops = 1; break;
    }
  }
  a->script = i < a->argc ? i : 0;
  if (a->script && strcmp(a->argv[i - 1], "--") == 0)
    a->wargv[a->nwargv++] = "--"; /* "-" after "--" stays a file name */
  for (; i < a->argc; i++)
    a->wargv[a->nwargv++] = a->argv[i];
  a->wargv[a->nwargv] = NULL;
  return 0;
}

/* -- Running chunks ------------------------------------------------------ */

/* The state the signal handlers arm; only lua_sethook touches it there. */
static lua_State *volatile cli_signal_L;
static volatile sig_atomic_t cli_want_stop;

/* Runs as a debug hook, so at a point where calling into Lua is safe: the
** signal handlers themselves must not.  It serves both: the flight
** recorder's request for this rank's Lua stack (SIGUSR2 from the launcher),
** and Ctrl-C, which raises "interrupted!".  The hook goes first, so a signal
** that comes while it runs arms it again. */
static void cli_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  if (dl_flight_stack_wanted()) {
    luaL_traceback(L, L, NULL, 0);
    dl_flight_set_stack(lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  if (!cli_want_stop) return;
  cli_want_stop = 0;
  /* Not luaL_error: a C hook adds no frame, so level 0 is the Lua code. */
  luaL_where(L, 0);
  lua_pushfstring(L, "%sinterrupted!", lua_tostring(L, -1));
  lua_error(L);
}

static void cli_arm(void) {
  lua_sethook(cli_signal_L, cli_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

static void cli_on_sigint(int sig) {
  /* A second Ctrl-C before the hook runs (a long C call, a JIT-compiled
  ** loop, which never checks hooks) kills the process the default way --
  ** but not a rank at the prompt over ranks: there the launcher passes on
  ** every press, and its third kills the ranks, as it says (a rank dead at
  ** the second would lose the session's state for nothing). */
  if (!link_in_prompt()) signal(sig, SIG_DFL);
  cli_want_stop = 1;
  cli_arm();
}

/* SIGUSR2: the launcher asks for the Lua stack (cli/flight.c), which the
** hook leaves in the flight recorder's ring.  Kept for the process's life
** once set: a late request must not kill a rank on its way out. */
static void cli_on_sigusr2(int sig) {
  (void)sig;
  dl_flight_want_stack();
  if (cli_signal_L) cli_arm();
}

/* Turns any error value into "message\nstack traceback:...".  A nil one
** stays nil, as in luajit and lua.c: error() is how a program fails without
** a word (busted ends a failing run so on Lua 5.1, after its own report),
** and cli_report prints nothing for it. */
static int cli_msghandler(lua_State *L) {
  if (lua_isnil(L, 1))
    return 1;
  if (lua_type(L, 1) != LUA_TSTRING && lua_type(L, 1) != LUA_TNUMBER) {
    if (!luaL_callmeta(L, 1, "__tostring") || lua_type(L, -1) != LUA_TSTRING) {
      lua_settop(L, 1);
      lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    lua_replace(L, 1);
  }
  luaL_traceback(L, L, lua_tostring(L, 1), 1);
  return 1;
}

int cli_docall(lua_State *L, int narg, int nres) {
  int base = lua_gettop(L) - narg; /* the function's index */
  struct sigaction act, old;
  lua_pushcfunction(L, cli_msghandler);
  lua_insert(L, base);
  cli_signal_L = L;
  memset(&act, 0, sizeof(act));
  act.sa_handler = cli_on_sigint;
  act.sa_flags = SA_RESTART; /* io.read keeps reading; the hook fires after */
  sigemptyset(&act.sa_mask);
  /* An ignored SIGINT (nohup, `cmd &` in a script) stays ignored. */
  sigaction(SIGINT, NULL, &old);
  if (old.sa_handler != SIG_IGN)
    sigaction(SIGINT, &act, NULL);
  struct sigaction usr2;
  memset(&usr2, 0, sizeof usr2);
  usr2.sa_handler = cli_on_sigusr2;
  usr2.sa_flags = SA_RESTART;
  sigemptyset(&usr2.sa_mask);
  sigaction(SIGUSR2, &usr2, NULL);
  int status = lua_pcall(L, narg, nres, base);
  sigaction(SIGINT, &old, NULL); /* the REPL's own handler, or SIG_DFL */
  /* A Ctrl-C that came too late for the hook must not stop the next chunk. */
  if (lua_gethook(L) == cli_hook)
    lua_sethook(L, NULL, 0, 0);
  cli_want_stop = 0;
  lua_remove(L, base);
  return status;
}

int cli_report(lua_State *L, int status) {
  if (status != 0) {
    if (!lua_isnil(L, -1)) {
      const char *msg = lua_tostring(L, -1);
      cli_message(msg ? msg : "(error object is not a string)");
    }
    lua_pop(L, 1); /* a nil too: the REPL's stack must not grow */
  }
  return status;
}

/* luaL_loadfile with the message lua.c users expect for a missing file:
** "cannot open foo.lua (No such file or directory)".  NULL reads stdin. */
static int cli_loadfile(lua_State *L, const char *fname) {
  if (fname) {
    FILE *f = fopen(fname, "r");
    if (f == NULL) {
      lua_pushfstring(L, "cannot open %s (%s)", fname, strerror(errno));
      return LUA_ERRFILE;
    }
    fclose(f);
  }
  return luaL_loadfile(L, fname);
}

static int cli_dochunk(lua_State *L, int status) {
  if (status == 0)
    status = cli_docall(L, 0, 0);
  return cli_report(L, status);
}

static int cli_dostring(lua_State *L, const char *s, const char *name) {
  return cli_dochunk(L, luaL_loadbuffer(L, s, strlen(s), name));
}

/* -l name, or -l g=mod as Lua 5.4 allows: global g = require "mod". */
static int cli_dolibrary(lua_State *L, const char *spec) {
  const char *eq = strchr(spec, '=');
  const char *mod = eq ? eq + 1 : spec;
  lua_getglobal(L, "require");
  lua_pushstring(L, mod);
  int status = cli_docall(L, 1, 1);
  if (status == 0) {
    if (eq)
      lua_pushlstring(L, spec, (size_t)(eq - spec));
    else
      lua_pushstring(L, spec);
    lua_insert(L, -2);
    lua_settable(L, LUA_GLOBALSINDEX);
  }
  return cli_report(L, status);
}

/* LUA_INIT as luajit runs it: "@file" or a chunk of code. */
static int cli_luainit(lua_State *L) {
  const char *init = getenv("LUA_INIT");
  if (init == NULL)
    return 0;
  if (init[0] == '@')
    return cli_dochunk(L, cli_loadfile(L, init + 1));
  return cli_dostring(L, init, "=LUA_INIT");
}

/* arg[0] is the script, arg[1..] its arguments, arg[-1] the program (and the
** options before it at arg[-2], ...).  Without a script, arg[0] is the
** program, as in Lua 5.4. */
static void cli_argtable(lua_State *L, const cli_args *a) {
  int script = a->script;
  lua_createtable(L, a->argc - script, script + 1);
  for (int i = 0; i < a->argc; i++) {
    lua_pushstring(L, a->argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

static int cli_script(lua_State *L, const cli_args *a) {
  const char *fname = a->argv[a->script];
  /* "-" is stdin, unless it came after "--" (then it is a file name). */
  if (strcmp(fname, "-") == 0 && strcmp(a->argv[a->script - 1], "--") != 0)
    fname = NULL;
  /* a launched worker's stdin is the launcher's to read: it sends it */
  int status = fname == NULL && link_active() ? link_load_script(L) : cli_loadfile(L, fname);
  if (status == 0) {
    int n = a->argc - a->script - 1;
    luaL_checkstack(L, n + 3, "too many arguments to script");
    for (int i = a->script + 1; i < a->argc; i++)
      lua_pushstring(L, a->argv[i]);
    status = cli_docall(L, n, 0);
  }
  return cli_report(L, status);
}

/* -- Module paths -------------------------------------------------------- */

static int cli_isdir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Cuts the last component off path ("/a/b" -> "/a", "/a" -> "/"). */
static void cli_parent(char *path) {
  char *slash = strrchr(path, '/');
  if (slash == NULL)
    strcpy(path, ".");
  else if (slash == path)
    path[1] = '\0';
  else
    *slash = '\0';
}

/* Adds "<base>/<sub>/?.lua;" (and "?/init.lua;" when withinit) to b if the
** directory exists, so an install does not search the build tree's layout. */
static void cli_addpath(luaL_Buffer *b, const char *base, const char *sub,
                        int withinit) {
  char dir[PATH_MAX + 64];
  if (snprintf(dir, sizeof(dir), "%s/%s", base, sub) >= (int)sizeof(dir) ||
      !cli_isdir(dir))
    return;
  luaL_addstring(b, dir);
  luaL_addstring(b, "/?.lua;");
  if (withinit) {
    luaL_addstring(b, dir);
    luaL_addstring(b, "/?/init.lua;");
  }
}

/* Prepends the Lua dirs found next to the real executable to package.path,
** keeping what LUA_PATH (or the default) put there, and records where the
** program lives in package.loaded["ddp.program"] = {exe, dir, root}. */
static void cli_paths(lua_State *L) {
  char exe[PATH_MAX], dir[PATH_MAX], root[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0)
    return; /* no /proc: only LUA_PATH and the defaults */
  exe[n] = '\0';
  strcpy(dir, exe);
  cli_parent(dir);
  strcpy(root, dir);
  cli_parent(root);

  lua_getglobal(L, "package");
  int pkg = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  cli_addpath(&b, dir, "lua", 0);                /* build/lua: generated */
  cli_addpath(&b, root, "lua", 1);               /* the library */
  cli_addpath(&b, root, "bindings", 0);          /* the FFI layer */
  cli_addpath(&b, root, "share/ddplua/lua", 1);  /* make install */
  lua_getfield(L, pkg, "path");
  luaL_addvalue(&b);
  luaL_pushresult(&b);
  lua_setfield(L, pkg, "path");

  lua_getfield(L, pkg, "loaded");
  lua_createtable(L, 0, 3);
  lua_pushstring(L, exe);
  lua_setfield(L, -2, "exe");
  lua_pushstring(L, dir);
  lua_setfield(L, -2, "dir");
  lua_pushstring(L, root);
  lua_setfield(L, -2, "root");
  lua_setfield(L, -2, "ddp.program");
  lua_settop(L, pkg - 1);
}

/* -- Main ---------------------------------------------------------------- */

/* One "-v" line for a kernel choice the library makes from variable var:
** `what: off_text (var=off)` when it is set to off, else on_text with
** oneDNN's version (nn/conv_onednn.c, ops/linalg.c read the same). */
static void print_choice(const char *what, const char *var, const char *off,
                         const char *off_text, const char *on_text) {
  const char *v = getenv(var);
  if (v && strcmp(v, off) == 0) {
    printf("%s: %s (%s=%s)\n", what, off_text, var, off);
    return;
  }
  const dnnl_version_t *dv = dnnl_version();
  printf("%s: oneDNN %d.%d.%d %s\n", what, dv->major, dv->minor, dv->patch, on_text);
}

/* Debian's luajit and OpenResty's luajit2 both call themselves "LuaJIT
** 2.1.0-beta3", and share the soname: what runs is told by a function only
** OpenResty's has (docs/luajit.md says why it matters). */
static const char *luajit_branch(void) {
  return dlsym(RTLD_DEFAULT, "lua_getexdata") ? "OpenResty's luajit2"
                                               : "not OpenResty's luajit2: see docs/luajit.md";
}

static void cli_version(void) {
  printf("%s %s (%s, %s)\n", CLI_NAME, dl_version(), LUAJIT_VERSION, luajit_branch());
  printf("BLAS: %s; kernels: %s\n", openblas_get_config(), openblas_get_corename());
  print_choice("conv", "DDPLUA_CONV", "im2col", "im2col + BLAS",
               "for float32 with 16+ input channels, else im2col + BLAS");
  print_choice("gemm", "DDPLUA_GEMM", "openblas", "OpenBLAS",
               "for float32 products of 2^20+ multiply-adds (at more than one thread: of 512+ "
               "rows or a reduction of 2048+), else OpenBLAS");
  fflush(stdout);
}

/* Runs under lua_cpcall, so that even an out-of-memory error while opening
** the libraries is reported rather than a panic. */
static int cli_pmain(lua_State *L) {
  cli_args *a = (cli_args *)lua_touserdata(L, 1);
  lua_settop(L, 0);
  a->status = 1;
  if (a->noenv) { /* luaopen_package then skips LUA_PATH and LUA_CPATH */
    lua_pushboolean(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV");
  }
  lua_gc(L, LUA_GCSTOP, 0);
  luaL_openlibs(L);
  lua_gc(L, LUA_GCRESTART, -1);
  cli_paths(L);
  link_register(L);
  cli_argtable(L, a);
  if (a->version)
    cli_version();
  if (!a->noenv && cli_luainit(L) != 0)
    return 0;
  for (int i = 0; i < a->nactions; i++) {
    const cli_action *act = &a->actions[i];
    int status = act->id == OPT_EXEC
                     ? cli_dostring(L, act->value, "=(command line)")
                     : cli_dolibrary(L, act->value);
    if (status != 0)
      return 0;
  }
  if (a->script && cli_script(L, a) != 0)
    return 0;
  if (a->interactive) {
    a->status = link_active() ? link_serve_repl(L) : repl_run(L);
    return 0;
  }
  if (a->script == 0 && a->nexec == 0 && !a->version) {
    if (isatty(STDIN_FILENO)) {
      a->status = repl_run(L);
      return 0;
    }
    if (cli_dochunk(L, cli_loadfile(L, NULL)) != 0)
      return 0;
  }
  a->status = 0;
  return 0;
}

/* OpenBLAS's idle threads spin (sched_yield) for about 2^28 cycles after
** each call unless OPENBLAS_THREAD_TIMEOUT says otherwise.  In a training
** loop they never stop spinning and take the cores from our own threads (an
** MLP step ran 1.7x slower at 2 threads). */
/* The kernels OpenBLAS should have picked where it picked ones without
** AVX2, or NULL.  Debian's OpenBLAS 0.3.21 (DYNAMIC_ARCH) does not know
** every newer CPU and falls back to its SSE3 "Prescott" kernels: on an
** AVX-512 Xeon every sgemm then ran about 2x slower than with the SkylakeX
** kernels (the explicit attention formula 52.5 -> 30.6 ms).  A core it
** did recognise (Haswell, Zen, SkylakeX, ...) is left as it chose. */
static const char *blas_core_for_cpu(void) {
  static const char *const modern[] = {"haswell", "zen", "skylakex", "cooperlake",
                                       "sapphirerapids", "excavator"};
  const char *core = openblas_get_corename();
  for (size_t i = 0; core && i < sizeof modern / sizeof *modern; i++)
    if (strcasecmp(core, modern[i]) == 0) return NULL;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512cd"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return NULL;
}

/* OpenMP (libgomp, under oneDNN's convolutions: nn/conv_onednn.c) keeps
** its idle threads spinning for a while after each parallel region unless
** OMP_WAIT_POLICY is PASSIVE; between the convolutions our own pool runs
** the elementwise ops, and the spinning threads took its cores (the CNN
** step at 2 threads: 113-116 ms spinning, 27-31 passive; bench/RESULTS.md). */
/* OpenBLAS and libgomp read these settings once, when they load -- before
** main -- so set what is missing and start again (once: the second start
** finds them set); the user's own values win (GOMP_SPINCOUNT too). */
/* The least address space (ulimit -v) ddplua runs in: the program and its
** libraries (~100 MiB), OpenBLAS's 128 MiB buffer for its products, and
** room for tensors.  Below it OpenBLAS would retry its buffer forever. */
#define MIN_AS_MIB 288

/* Under an address-space limit: refused below MIN_AS_MIB, by name, before
** OpenBLAS hangs; above, OpenBLAS's threads as many as it leaves room for
** (dl_blas_thread_cap) and malloc's per-thread arenas (64 MiB of address
** space each) two.  Returns whether the environment changed. */
static int fit_address_space(void) {
  struct rlimit as;
  if (getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) return 0;
  unsigned long long mib = (unsigned long long)(as.rlim_cur >> 20);
  if (mib < MIN_AS_MIB) {
    fprintf(stderr,
            "ddplua: the address-space limit (ulimit -v) is %llu MiB; ddplua needs at least %d MiB "
            "(OpenBLAS keeps a 128 MiB buffer for its products and waits forever when it cannot "
            "have it): raise it (ulimit -v %d) or lift it\n",
            mib, MIN_AS_MIB, MIN_AS_MIB * 1024);
    _exit(1);  /* not exit(): OpenBLAS's exit handler waits for its threads, stuck as said */
  }
  int again = 0;
  int cap = dl_blas_thread_cap();  /* below DL_BLAS_UNLIMITED: a limit is set */
  if (!getenv("OPENBLAS_NUM_THREADS")) {
    char n[16];
    snprintf(n, sizeof n, "%d", cap < 64 ? cap : 64);
    again |= setenv("OPENBLAS_NUM_THREADS", n, 1) == 0;
  }
  if (!getenv("MALLOC_ARENA_MAX")) again |= setenv("MALLOC_ARENA_MAX", "2", 1) == 0;
  return again;
}

/* Under a small process limit (ulimit -u, which counts threads): OpenBLAS
** starts its threads when it loads and, refused one, ends the process with
** SIGINT and only its own words; one thread starts none.  Whatever fails
** later (a worker, the store's thread) is then ours to name. */
static int fit_process_limit(void) {
  struct rlimit np;
  if (getrlimit(RLIMIT_NPROC, &np) != 0 || np.rlim_cur == RLIM_INFINITY || np.rlim_cur >= 256 ||
      getenv("OPENBLAS_NUM_THREADS") || geteuid() == 0)  /* root is not held to it */
    return 0;
  return setenv("OPENBLAS_NUM_THREADS", "1", 1) == 0;
}

static void tame_thread_pools(char **argv) {
  const char *pre = getenv("LD_PRELOAD");
  /* under valgrind /proc/self/exe is valgrind's own tool: stay as we are */
  if (pre && strstr(pre, "vgpreload")) return;
  int again = fit_address_space();
  again |= fit_process_limit();
  if (!getenv("OPENBLAS_THREAD_TIMEOUT")) again |= setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1) == 0;
  const char *core = getenv("OPENBLAS_CORETYPE") ? NULL : blas_core_for_cpu();
  if (core) again |= setenv("OPENBLAS_CORETYPE", core, 1) == 0;
  if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT"))
    again |= setenv("OMP_WAIT_POLICY", "PASSIVE", 1) == 0;
  if (again) execv("/proc/self/exe", argv);  /* returns only on failure: go on as is */
}

int main(int argc, char **argv) {
  /* A write past `ulimit -f` fails with EFBIG ("File too large": a save
  ** reports it and removes its temporary file) instead of killing the
  ** program; Python does the same.  Children started by a script inherit it. */
  signal(SIGXFSZ, SIG_IGN);
  tame_thread_pools(argv);
  link_open(); /* a launched worker: the launcher's control channel */
  /* A rank's stdout is a pipe (to the launcher, srun, mpirun): block
  ** buffered, the lines a rank printed last -- those a user needs when
  ** another rank failed -- would die with it when the launcher stops it.
  ** Line buffered, each line is out when printed. */
  if (link_active() || (getenv("RANK") && *getenv("RANK"))) setvbuf(stdout, NULL, _IOLBF, 0);
  cli_args a;
  memset(&a, 0, sizeof(a));
  a.argc = argc;
  a.argv = argv;
  a.actions = calloc((size_t)argc + 1, sizeof(*a.actions));
  a.wargv = calloc((size_t)argc + 3, sizeof(*a.wargv));
  if (a.actions == NULL || a.wargv == NULL) {
    cli_message("not enough memory");
    return 1;
  }
  a.wargv[a.nwargv++] = argv[0];
  /* `ddplua analyze DIR`: the flight recorder's dumps (cli/flight.c) */
  if (argc > 1 && strcmp(argv[1], "analyze") == 0) {
    free(a.actions);
    free(a.wargv);
    return flight_analyze(argc - 2, argv + 2);
  }
  /* `ddplua trace DIR`: the ranks' trace files merged (cli/trace.c) */
  if (argc > 1 && strcmp(argv[1], "trace") == 0) {
    free(a.actions);
    free(a.wargv);
    return trace_command(argc - 2, argv + 2);
  }
  /* `ddplua doctor ...` (a script named doctor: `ddplua ./doctor`) */
  int doctor = argc > 1 && strcmp(argv[1], "doctor") == 0;
  if (doctor) {
    a.argc--;
    a.argv++;
  }
  if (cli_parse(&a) != 0) {
    cli_usage(stderr);
    free(a.actions);
    free(a.wargv);
    return 1;
  }
  if (a.help) {
    cli_usage(stdout);
    free(a.actions);
    free(a.wargv);
    return 0;
  }
  if (doctor) {
    int status = a.script ? (cli_message("doctor takes launcher options, not a script"), 1)
                          : launcher_doctor(&a.lo);
    free(a.actions);
    free(a.wargv);
    return status;
  }
  if (!a.launch && (a.lo.node_rank || a.lo.master_addr || a.lo.master_port ||
                    a.lo.log_dir || a.lo.no_prefix || a.lo.quiet_ranks ||
                    a.lo.grace || a.lo.max_restarts || a.lo.bind_cores ||
                    a.lo.signals || a.lo.save_grace || a.lo.dump_on_exit || a.lo.trace_dir ||
                    a.lo.trace_ops)) {
    cli_message("launcher options need --nproc N (or --nnodes M)");
    free(a.actions);
    free(a.wargv);
    return 1;
  }
  if (a.launch) {
    /* As lua.c decides for one process: a script, -e chunks, the prompt
    ** (-i, or nothing to run and a terminal) or stdin ("-", or a pipe). */
    int dash = a.script && strcmp(argv[a.script], "-") == 0 && strcmp(argv[a.script - 1], "--") != 0;
    int nothing = a.script == 0 && a.nexec == 0 && !a.version;
    a.lo.interactive = a.interactive || (nothing && isatty(STDIN_FILENO));
    a.lo.stdin_script = dash || (nothing && !a.lo.interactive);
    if (a.lo.interactive && !a.interactive) { /* the workers serve the prompt: -i */
      memmove(a.wargv + 2, a.wargv + 1, (size_t)a.nwargv * sizeof *a.wargv);
      a.wargv[1] = "-i";
      a.nwargv++;
    } else if (a.lo.stdin_script && !dash) {
      a.wargv[a.nwargv++] = "-";
      a.wargv[a.nwargv] = NULL;
    }
    int status = launcher_run(&a.lo, a.wargv);
    free(a.actions);
    free(a.wargv);
    return status;
  }
  lua_State *L = luaL_newstate();
  if (L == NULL) {
    cli_message("cannot create state: not enough memory");
    free(a.actions);
    return 1;
  }
  int status = lua_cpcall(L, cli_pmain, &a);
  cli_report(L, status);
  lua_close(L);
  free(a.actions);
  free(a.wargv);
  return status != 0 ? 1 : a.status;
}
