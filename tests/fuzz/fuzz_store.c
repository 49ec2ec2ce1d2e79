/*
** fuzz_store.c -- libFuzzer target for the rendezvous store's frame parser:
** any bytes as what one connection sent, through the server's real parser
** and handlers (table included), whole and in small chunks, so a header or
** body split across reads is covered.  Built with ASan and UBSan by `make fuzz`.
*/
#include <stdint.h>
#include <stdlib.h>

#include "dist/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* the first byte picks the read size; the token ("tok") comes next */
  size_t chunk = size ? (size_t)data[0] % 17 : 0;
  if (size) data++, size--;
  store_fuzz_feed(data, size, chunk);
  return 0;
}
