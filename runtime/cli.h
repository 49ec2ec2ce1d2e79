/* cli.h -- what the ddplua program's two files (main.c, repl.c) share. */
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

#endif
