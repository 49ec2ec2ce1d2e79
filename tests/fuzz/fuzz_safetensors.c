/*
** fuzz_safetensors.c -- libFuzzer target for the safetensors reader: any
** bytes as a file, through the parser and validation dl_st_open uses, then
** every tensor read in full before and after the handle closes.  Built with
** AddressSanitizer and UBSan by `make fuzz`.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

static volatile unsigned sink;

/* Reads every byte, so a view reaching outside the buffer is reported. */
static void touch(const dl_tensor *t) {
  const unsigned char *p = dl_tensor_data(t);
  int64_t n = dl_tensor_numel(t) * dl_dtype_size(dl_tensor_dtype(t));
  unsigned s = 0;
  for (int64_t i = 0; i < n; i++) s += p[i];
  sink += s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* an exact-size heap copy: the reader owns and frees it, and ASan sees
  ** one byte past it */
  void *copy = malloc(size ? size : 1);
  if (!copy) return 0;
  memcpy(copy, data, size);
  dl_clear_error();
  dl_st_file *f = st_open_buffer(copy, size, 0, "fuzz.safetensors");
  if (!f) {
    if (!*dl_last_error()) abort();  /* every refusal must say why */
    return 0;
  }
  int n = dl_st_count(f);
  dl_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
  for (int i = 0; ts && i < n; i++) {
    sink += (unsigned)strlen(dl_st_name(f, i));
    if ((ts[i] = dl_st_tensor(f, i))) touch(ts[i]);
  }
  for (int i = 0; i < dl_st_meta_count(f); i++)
    sink += (unsigned)(strlen(dl_st_meta_key(f, i)) + strlen(dl_st_meta_value(f, i)));
  dl_st_close(f);  /* tensors keep the buffer alive */
  for (int i = 0; ts && i < n; i++) {
    if (ts[i]) touch(ts[i]);
    dl_tensor_release(ts[i]);
  }
  free(ts);
  return 0;
}
