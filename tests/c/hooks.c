/*
** hooks.c -- test hooks the Lua specs reach through the FFI, built as
** build/tests/libddplua_testhooks.so and never part of libddplua.so (as
** Lua keeps its own in ltests.c).  It only touches the tensor's struct, so
** it needs nothing the library hides.
*/
#include "core/internal.h"

/* Marks t's storage as lying on `device` while its memory stays host
** memory, so a spec can check that every op refuses a device tensor with
** an error instead of reading it; put -1 back before the tensor dies.
** -1 for a NULL or freed tensor. */
__attribute__((visibility("default"))) int dl_test_set_device(dl_tensor *t, int device) {
  if (!t || !t->storage || (t->flags & TF_FREED)) return -1;
  t->storage->device = device;
  return 0;
}
