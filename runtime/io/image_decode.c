/*
** io/image_decode.c -- JPEG and PNG images decoded into uint8 [C, H, W]
** tensors through the libraries every distribution keeps: libjpeg-turbo
** (SIMD decoding, and its scaled decoding, which makes a 1/2 .. 1/8 size
** picture for the price of a fraction of the work) and libpng.  The format
** is told from the first bytes, never from a file's name.
**
** Both libraries report errors by longjmp out of their own callbacks; the
** jump lands in this file, in the function that called into the library,
** which frees what it made and returns an error: nothing jumps across the
** FFI.  An encoded image is untrusted input: the header's size is checked
** against DL_IMAGE_MAX_PIXELS before a pixel buffer is made, and a
** truncated JPEG -- which libjpeg would finish in gray with a warning -- is
** an error.
*/
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "io/image.h"

#define ANY_NAME(name) ((name) ? (name) : "the image")

/* -- Shared: the bytes, the format, the planes ----------------------------------- */

DL_HIDDEN int image_bytes(const char *op, const dl_tensor *t, const uint8_t **data, size_t *n) {
  if (!t) return dl_err(EM_NULLARG, op, "bytes");
  if (t->dtype != DL_UINT8 || t->storage->device >= 0 || !dl_tensor_is_contiguous(t))
    return dl_err(EM_IMG_BYTES, op, dl_tensor_is_contiguous(t) ? "" : "non-contiguous ", fmt_dtype(t->dtype),
                  t->storage->device >= 0 ? "CUDA" : "the CPU");
  *data = (const uint8_t *)tensor_first(t);
  *n = (size_t)dl_tensor_numel(t);
  return 0;
}

static int starts(const uint8_t *p, size_t n, const char *magic, size_t m) {
  return n >= m && memcmp(p, magic, m) == 0;
}

DL_HIDDEN int image_sniff(const char *op, const char *name, const uint8_t *p, size_t n) {
  name = ANY_NAME(name);
  if (n == 0) return dl_err(EM_IMG_EMPTY, op, name);
  if (starts(p, n, "\xff\xd8\xff", 3)) return DL_IMAGE_JPEG;
  if (starts(p, n, "\x89PNG\r\n\x1a\n", 8)) return DL_IMAGE_PNG;
  /* say what it is when we can tell: the fix is a conversion */
  const char *what = NULL;
  if (starts(p, n, "GIF87a", 6) || starts(p, n, "GIF89a", 6)) what = "a GIF image";
  else if (starts(p, n, "BM", 2)) what = "a BMP image";
  else if (n >= 12 && starts(p, n, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4)) what = "a WebP image";
  else if (starts(p, n, "II*\0", 4) || starts(p, n, "MM\0*", 4)) what = "a TIFF image";
  else if (n >= 12 && !memcmp(p + 4, "ftyp", 4) && (!memcmp(p + 8, "avif", 4) || !memcmp(p + 8, "heic", 4)))
    what = "an AVIF/HEIF image";
  else if (n >= 2 && p[0] == 'P' && p[1] >= '1' && p[1] <= '7') what = "a PNM (PPM/PGM) image";
  else if (starts(p, n, "\xff\xd8", 2)) what = "a cut JPEG (no marker after the start of image)";
  else if (starts(p, n, "\x89PNG", 4)) what = "a damaged PNG signature";
  char msg[160];
  if (what) {
    snprintf(msg, sizeof msg, "it is %s%s", what,
             what[0] == 'a' && what[2] != 'c' && what[2] != 'd' ? "; convert it to PNG or JPEG" : "");
  } else {
    int k = snprintf(msg, sizeof msg, "it starts with bytes");
    for (size_t i = 0; i < n && i < 8; i++) k += snprintf(msg + k, sizeof msg - (size_t)k, " %02x", p[i]);
  }
  return dl_err(EM_IMG_FORMAT, op, name, msg);
}

/* One RGB row into three planes.  O3 for this loop alone: GCC unrolls it
** (it does not vectorise the stride-3 loads), and the copy fell from 12% to
** 8% of a decode + RandomResizedCrop pipeline's time. */
__attribute__((optimize("O3"))) static void deinterleave3(const uint8_t *restrict in, uint8_t *restrict r,
                                                           uint8_t *restrict g, uint8_t *restrict b, int64_t w) {
  for (int64_t x = 0; x < w; x++) {
    r[x] = in[3 * x];
    g[x] = in[3 * x + 1];
    b[x] = in[3 * x + 2];
  }
}

DL_HIDDEN void image_rows_planar(const uint8_t *hwc, size_t stride, int64_t y0, int64_t rows, uint8_t *out,
                                 int64_t h, int64_t w, int c) {
  size_t plane = (size_t)(h * w);
  for (int64_t y = y0; y < y0 + rows; y++) {
    const uint8_t *row = hwc + (size_t)(y - y0) * stride;
    uint8_t *o = out + (size_t)(y * w);
    if (c == 1) {
      memcpy(o, row, (size_t)w);
    } else if (c == 3) {
      deinterleave3(row, o, o + plane, o + 2 * plane, w);
    } else {
      for (int64_t x = 0; x < w; x++)
        for (int k = 0; k < c; k++) o[k * plane + x] = row[c * x + k];
    }
  }
}

DL_HIDDEN dl_tensor *image_planar(const uint8_t *hwc, int64_t h, int64_t w, int c, size_t stride) {
  int64_t shape[3] = {c, h, w};
  dl_tensor *t = dl_empty(shape, 3, DL_UINT8);
  if (t) image_rows_planar(hwc, stride, 0, h, (uint8_t *)tensor_first(t), h, w, c);
  return t;
}

static int mode_channels(const char *op, int mode, int stored) {
  switch (mode) {
    case DL_IMAGE_UNCHANGED: return stored;
    case DL_IMAGE_GRAY: return 1;
    case DL_IMAGE_GRAY_ALPHA: return 2;
    case DL_IMAGE_RGB: return 3;
    case DL_IMAGE_RGB_ALPHA: return 4;
    default: return dl_err(EM_IMG_MODE, op, mode);
  }
}

static int check_size(const char *op, const char *name, int64_t h, int64_t w) {
  if (h <= 0 || w <= 0 || h * w > DL_IMAGE_MAX_PIXELS)
    return dl_err(EM_IMG_LIMIT, op, ANY_NAME(name), (long long)w, (long long)h, (long long)DL_IMAGE_MAX_PIXELS);
  return 0;
}

/* Rows libjpeg decodes before they go into the planes: 16 of a 4000-pixel
** RGB image are 192 KB. */
#define JPEG_ROWS 16

/* -- JPEG ---------------------------------------------------------------------------- */

typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  int truncated;
  char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_fail(j_common_ptr c) {
  jpeg_err *e = (jpeg_err *)c->err;
  c->err->format_message(c, e->msg);
  longjmp(e->jump, 1);
}

/* Warnings: the end of the data before the image's end is a truncated file
** (libjpeg would fill the rest with gray); the others ("extraneous bytes
** before marker", ...) are what PIL and torchvision let pass too. */
static void jpeg_warn(j_common_ptr c, int level) {
  jpeg_err *e = (jpeg_err *)c->err;
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) {
    e->truncated = 1;
    c->err->format_message(c, e->msg);
    longjmp(e->jump, 1);
  }
  if (level < 0) c->err->num_warnings++;
}

static int jpeg_error(const char *op, const char *name, jpeg_err *e) {
  if (e->truncated) return dl_err(EM_IMG_TRUNC, op, ANY_NAME(name), "JPEG", e->msg);
  /* a cut file may also fail as a bad marker or bad Huffman code */
  return dl_err(EM_IMG_CORRUPT, op, ANY_NAME(name), "JPEG", e->msg);
}

static int jpeg_stored_channels(const struct jpeg_decompress_struct *c) {
  return c->jpeg_color_space == JCS_GRAYSCALE ? 1 : 3;
}

/* The largest reduction M/8 (M = 1..8) keeping the output at least
** min_h x min_w (libjpeg rounds the output size up). */
static int jpeg_scale(int64_t h, int64_t w, int64_t min_h, int64_t min_w) {
  if (min_h <= 0 || min_w <= 0) return 8;
  for (int m = 1; m < 8; m++)
    if ((h * m + 7) / 8 >= min_h && (w * m + 7) / 8 >= min_w) return m;
  return 8;
}

/* Adobe's CMYK as libjpeg gives it (inverted), to RGB or gray, in place
** (the rows shrink from 4 bytes a pixel to out_c). */
static void cmyk_row(uint8_t *row, int64_t w, int out_c) {
  for (int64_t x = 0; x < w; x++) {
    int c = row[4 * x], m = row[4 * x + 1], y = row[4 * x + 2], k = row[4 * x + 3];
    int r = c * k / 255, g = m * k / 255, b = y * k / 255;
    if (out_c == 1) {
      row[x] = (uint8_t)((r * 19595 + g * 38470 + b * 7471 + 32768) >> 16);
    } else {
      row[3 * x] = (uint8_t)r;
      row[3 * x + 1] = (uint8_t)g;
      row[3 * x + 2] = (uint8_t)b;
    }
  }
}

static int jpeg_header(const char *op, const char *name, const uint8_t *p, size_t n, dl_image_header *out) {
  struct jpeg_decompress_struct c;
  jpeg_err e = {0};
  c.err = jpeg_std_error(&e.pub);
  e.pub.error_exit = jpeg_fail;
  e.pub.emit_message = jpeg_warn;
  if (setjmp(e.jump)) {
    jpeg_destroy_decompress(&c);
    return jpeg_error(op, name, &e);
  }
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, p, (unsigned long)n);
  jpeg_read_header(&c, TRUE);
  out->format = DL_IMAGE_JPEG;
  out->channels = jpeg_stored_channels(&c);
  out->height = c.image_height;
  out->width = c.image_width;
  out->bit_depth = c.data_precision;
  out->progressive = c.progressive_mode ? 1 : 0;
  jpeg_destroy_decompress(&c);
  return 0;
}

static dl_tensor *jpeg_decode(const char *op, const char *name, const uint8_t *p, size_t n, int mode,
                              int64_t min_h, int64_t min_w) {
  struct jpeg_decompress_struct c;
  jpeg_err e = {0};
  uint8_t *volatile buf = NULL;
  dl_tensor *volatile t = NULL;
  c.err = jpeg_std_error(&e.pub);
  e.pub.error_exit = jpeg_fail;
  e.pub.emit_message = jpeg_warn;
  if (setjmp(e.jump)) {
    jpeg_destroy_decompress(&c);
    free(buf);
    if (t) dl_tensor_release(t);
    return jpeg_error(op, name, &e), NULL;
  }
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, p, (unsigned long)n);
  jpeg_read_header(&c, TRUE);
  int64_t h = c.image_height, w = c.image_width;
  if (check_size(op, name, h, w)) {
    jpeg_destroy_decompress(&c);
    return NULL;
  }
  int stored = jpeg_stored_channels(&c);
  int want = mode_channels(op, mode, stored);
  if (want < 0) {
    jpeg_destroy_decompress(&c);
    return NULL;
  }
  int color = want >= 3 ? 3 : 1;  /* what libjpeg makes; alpha is added after */
  int cmyk = c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK;
  c.out_color_space = cmyk ? JCS_CMYK : color == 1 ? JCS_GRAYSCALE : JCS_RGB;
  c.scale_num = (unsigned)jpeg_scale(h, w, min_h, min_w);
  c.scale_denom = 8;
  jpeg_start_decompress(&c);
  int64_t oh = c.output_height, ow = c.output_width;
  int got = c.output_components;  /* 4 for CMYK */
  /* a few rows at a time into a buffer that stays in the cache, each batch
  ** spread into the planes at once: no whole interleaved copy of the
  ** picture to write out and read back */
  size_t stride = (size_t)ow * (size_t)(got > want ? got : want);
  int64_t shape[3] = {want, oh, ow};
  t = dl_empty(shape, 3, DL_UINT8);
  buf = malloc(stride * JPEG_ROWS);
  if (!t || !buf) {
    jpeg_destroy_decompress(&c);
    free(buf);
    if (t) dl_tensor_release(t);
    return t ? dl_errp(EM_NOMEM, op, (long long)(stride * JPEG_ROWS), 0LL) : NULL;
  }
  uint8_t *planes = (uint8_t *)tensor_first(t);
  while (c.output_scanline < c.output_height) {
    int64_t y0 = c.output_scanline, n = 0;
    while (n < JPEG_ROWS && c.output_scanline < c.output_height) {
      JSAMPROW row = buf + stride * (size_t)n;
      n += jpeg_read_scanlines(&c, &row, 1);
    }
    for (int64_t k = 0; k < n; k++) {
      uint8_t *row = buf + stride * (size_t)k;
      if (cmyk) cmyk_row(row, ow, color);
      if (want == 2 || want == 4) {  /* opaque alpha, from the right so the row can grow in place */
        for (int64_t x = ow - 1; x >= 0; x--) {
          row[want * x + want - 1] = 255;
          for (int q = color - 1; q >= 0; q--) row[want * x + q] = row[color * x + q];
        }
      }
    }
    image_rows_planar(buf, stride, y0, n, planes, oh, ow, want);
  }
  jpeg_finish_decompress(&c);
  jpeg_destroy_decompress(&c);
  free(buf);
  return t;
}

/* -- PNG ------------------------------------------------------------------------------- */

typedef struct {
  char msg[IMAGE_MSG];  /* first: image_png_fail writes it */
  const uint8_t *p;
  size_t n, at;
  int truncated;
} png_src;

DL_HIDDEN void image_png_fail(png_structp png, png_const_charp msg) {
  char *buf = png_get_error_ptr(png);
  snprintf(buf, IMAGE_MSG, "%s", msg);
  png_longjmp(png, 1);
}

DL_HIDDEN void image_png_warn(png_structp png, png_const_charp msg) {
  (void)png;
  (void)msg;
}

static void png_read_mem(png_structp png, png_bytep out, size_t len) {
  png_src *s = png_get_io_ptr(png);
  if (len > s->n - s->at) {
    s->truncated = 1;
    png_error(png, "the data ends early");
  }
  memcpy(out, s->p + s->at, len);
  s->at += len;
}

static int png_failed(const char *op, const char *name, const png_src *s) {
  if (s->truncated) return dl_err(EM_IMG_TRUNC, op, ANY_NAME(name), "PNG", s->msg);
  return dl_err(EM_IMG_CORRUPT, op, ANY_NAME(name), "PNG", s->msg);
}

/* The header from IHDR, which the signature must be followed by. */
static int png_header(const char *op, const char *name, const uint8_t *p, size_t n, dl_image_header *out) {
  if (n < 33) return dl_err(EM_IMG_TRUNC, op, ANY_NAME(name), "PNG", "the header ends early");
  if (memcmp(p + 12, "IHDR", 4))
    return dl_err(EM_IMG_CORRUPT, op, ANY_NAME(name), "PNG", "the first chunk is not IHDR");
  uint32_t w = (uint32_t)p[16] << 24 | (uint32_t)p[17] << 16 | (uint32_t)p[18] << 8 | p[19];
  uint32_t h = (uint32_t)p[20] << 24 | (uint32_t)p[21] << 16 | (uint32_t)p[22] << 8 | p[23];
  int depth = p[24], type = p[25];
  static const int chans[7] = {1, 0, 3, 3, 2, 0, 4};
  if (type > 6 || !chans[type])
    return dl_err(EM_IMG_CORRUPT, op, ANY_NAME(name), "PNG", "unknown color type in IHDR");
  out->format = DL_IMAGE_PNG;
  out->channels = chans[type];
  out->height = h;
  out->width = w;
  out->bit_depth = depth;
  out->progressive = p[28] ? 1 : 0;  /* Adam7 interlacing */
  return 0;
}

static dl_tensor *png_decode(const char *op, const char *name, const uint8_t *p, size_t n, int mode) {
  png_src s = {.p = p, .n = n};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, image_png_fail, image_png_warn);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  uint8_t *volatile buf = NULL;
  png_bytep *volatile rows = NULL;
  if (!info) {
    png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
    return dl_errp(EM_NOMEM, op, (long long)sizeof(png_struct *), 0LL);
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, NULL);
    free(buf);
    free(rows);
    return png_failed(op, name, &s), NULL;
  }
  png_set_read_fn(png, &s, png_read_mem);
  /* the decompressed chunks (iCCP, zTXt) a file may ask for: bounded */
  png_set_chunk_malloc_max(png, 64u << 20);
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  png_read_info(png, info);
  png_uint_32 w32, h32;
  int depth, type;
  png_get_IHDR(png, info, &w32, &h32, &depth, &type, NULL, NULL, NULL);
  int64_t h = h32, w = w32;
  if (check_size(op, name, h, w)) {
    png_destroy_read_struct(&png, &info, NULL);
    return NULL;
  }
  int trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  int stored = type == PNG_COLOR_TYPE_GRAY ? 1 : type == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
             : type == PNG_COLOR_TYPE_RGB_ALPHA ? 4 : 3;
  if (trns && (stored == 1 || stored == 3)) stored++;
  int want = mode_channels(op, mode, stored);
  if (want < 0) {
    png_destroy_read_struct(&png, &info, NULL);
    return NULL;
  }
  int has_alpha = stored == 2 || stored == 4;
  int is_color = stored >= 3;
  png_set_expand(png);  /* palette -> RGB, gray < 8 bits -> 8, tRNS -> alpha */
  if (depth == 16) png_set_strip_16(png);
  if (want <= 2 && is_color) png_set_rgb_to_gray_fixed(png, 1, 29890, 58700);
  if (want >= 3 && !is_color) png_set_gray_to_rgb(png);
  if ((want == 1 || want == 3) && has_alpha) png_set_strip_alpha(png);
  if ((want == 2 || want == 4) && !has_alpha) png_set_add_alpha(png, 0xff, PNG_FILLER_AFTER);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  size_t stride = png_get_rowbytes(png, info);
  if ((int)png_get_channels(png, info) != want || stride != (size_t)w * (size_t)want)
    png_error(png, "libpng's output does not have the channels asked for");
  buf = malloc(stride * (size_t)h);
  rows = malloc(sizeof(png_bytep) * (size_t)h);
  if (!buf || !rows) png_error(png, "out of memory for the pixels");
  for (int64_t y = 0; y < h; y++) rows[y] = buf + stride * (size_t)y;
  png_read_image(png, rows);
  /* the chunks after the pixels (IEND) are not read: an image whose pixels
  ** are all there is whole, as torchvision reads it */
  png_destroy_read_struct(&png, &info, NULL);
  dl_tensor *t = image_planar(buf, h, w, want, stride);
  free(buf);
  free(rows);
  return t;
}

/* -- The public calls --------------------------------------------------------------- */

DL_API int dl_image_header_read(const dl_tensor *bytes, const char *name, dl_image_header *out) {
  const char *op = "image_info";
  const uint8_t *p;
  size_t n;
  if (!out) return dl_err(EM_NULLARG, op, "out");
  if (image_bytes(op, bytes, &p, &n)) return DL_EINVAL;
  memset(out, 0, sizeof *out);
  int f = image_sniff(op, name, p, n);
  if (f < 0) return f;
  return f == DL_IMAGE_JPEG ? jpeg_header(op, name, p, n, out) : png_header(op, name, p, n, out);
}

DL_API dl_tensor *dl_image_decode(const dl_tensor *bytes, dl_image_mode mode, int64_t min_h, int64_t min_w,
                                  const char *name) {
  const char *op = "decode_image";
  const uint8_t *p;
  size_t n;
  if (image_bytes(op, bytes, &p, &n)) return NULL;
  int f = image_sniff(op, name, p, n);
  if (f < 0) return NULL;
  if (mode_channels(op, mode, 1) < 0) return NULL;
  return f == DL_IMAGE_JPEG ? jpeg_decode(op, name, p, n, mode, min_h, min_w) : png_decode(op, name, p, n, mode);
}
