/*
** ddplua_base.h -- what every part of the public API shares: the export
** macro, the error codes and the calls that read the last error.
** Include ddplua.h (see there for the contract of every call).
*/
#ifndef DDPLUA_BASE_H
#define DDPLUA_BASE_H

#ifndef DL_CDEF
#include <stddef.h>
#include <stdint.h>
#endif

#ifndef DL_CDEF
#ifdef __cplusplus
extern "C" {
#endif
#define DL_API __attribute__((visibility("default")))
#else
#define DL_API
#endif

/* -- Errors -------------------------------------------------------------- */

typedef enum dl_status {
  DL_OK = 0,
  DL_EINVAL = -1,   /* bad argument value */
  DL_ESHAPE = -2,   /* shapes do not fit */
  DL_EDTYPE = -3,   /* dtype not supported or mismatched */
  DL_EINDEX = -4,   /* index or dim out of range */
  DL_ENOMEM = -5,   /* allocation failed */
  DL_EDEVICE = -6,  /* wrong or missing device */
  DL_EIO = -7,      /* file or system call failed */
  DL_ESTATE = -8    /* call not valid in the current state */
} dl_status;

DL_API const char *dl_last_error(void);
DL_API int dl_last_error_code(void);
DL_API void dl_clear_error(void);
DL_API const char *dl_version(void);

#ifndef DL_CDEF
#ifdef __cplusplus
}
#endif
#endif

#endif /* DDPLUA_BASE_H */
