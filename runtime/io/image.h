/*
** io/image.h -- what the image decoder and encoder share: the check of an
** encoded image's bytes, the format told from its first bytes, and the
** copies between the codecs' interleaved rows and our [C, H, W] planes.
*/
#ifndef DL_IO_IMAGE_H
#define DL_IO_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include <png.h>

#include "core/internal.h"

/* libpng's callbacks for the decoder's and the encoder's states, each of
** which starts with char msg[IMAGE_MSG]: an error is kept there and jumps
** back to the png_jmpbuf of the calling function; warnings (e.g. "iCCP:
** known incorrect sRGB profile") pass, as PIL lets them. */
#define IMAGE_MSG 200
DL_HIDDEN void image_png_fail(png_structp png, png_const_charp msg);
DL_HIDDEN void image_png_warn(png_structp png, png_const_charp msg);

/* The bytes of an encoded image: a 1-D (or any contiguous) uint8 CPU
** tensor.  0, or the error naming op. */
DL_HIDDEN int image_bytes(const char *op, const dl_tensor *t, const uint8_t **data, size_t *n);
/* DL_IMAGE_JPEG or DL_IMAGE_PNG from the first bytes, or 0 with the error
** naming name and, when it can tell, what the bytes are instead. */
DL_HIDDEN int image_sniff(const char *op, const char *name, const uint8_t *p, size_t n);
/* Interleaved rows y0 .. y0 + rows - 1 (row stride `stride` bytes) into
** the planes of out, a [c, h, w] uint8 buffer. */
DL_HIDDEN void image_rows_planar(const uint8_t *hwc, size_t stride, int64_t y0, int64_t rows, uint8_t *out,
                                 int64_t h, int64_t w, int c);
/* Interleaved rows (h x w x c, row stride `stride` bytes) into a new
** uint8 [c, h, w] tensor. */
DL_HIDDEN dl_tensor *image_planar(const uint8_t *hwc, int64_t h, int64_t w, int c, size_t stride);

#endif
