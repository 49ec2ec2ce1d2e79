/* nodelist.h -- SLURM's compressed host lists, as in SLURM_JOB_NODELIST:
** "gpu[001-004,010],cpu7" names gpu001..gpu004, gpu010 and cpu7 (zero
** padding kept).  Hidden: the launch layout (launch_env.c) reads the first
** host of a step's list; the C tests link it from the archive. */
#ifndef DL_NODELIST_H
#define DL_NODELIST_H

#include "core/internal.h"

/* The number of hosts, or -1 when the list is malformed. */
DL_HIDDEN int nodelist_count(const char *list);
/* Writes host number index (0-based) of list to out (cap bytes, NUL
** included); -1 when the list is malformed, index is out of range or the
** name does not fit. */
DL_HIDDEN int nodelist_host(char *out, int cap, const char *list, int index);
/* What the last failing call found wrong ("bad node list ...: why"). */
DL_HIDDEN const char *nodelist_error(void);

#endif
