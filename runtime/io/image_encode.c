/*
** io/image_encode.c -- uint8 [C, H, W] images encoded as PNG (libpng) or
** JPEG (libjpeg-turbo) bytes in memory: what the tools that write image
** folders and the tests' own pictures need, and what a user saving a
** sample or a generated image expects (torchvision.io.encode_png/jpeg).
** The file is written by the caller, atomically (dl_file_create).
*/
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "io/image.h"

/* The image's pixels interleaved (h x w x c) in a new buffer, whatever its
** strides; NULL with the error set. */
static uint8_t *interleave(const char *op, const dl_tensor *img, const char *channels, int c_lo, int c_hi,
                           int64_t *h, int64_t *w, int *c) {
  if (!img) return dl_errp(EM_NULLARG, op, "image");
  if (img->dtype != DL_UINT8 || img->ndim != 3 || img->shape[0] < c_lo || img->shape[0] > c_hi ||
      img->storage->device >= 0)
    return dl_errp(EM_IMG_INPUT, op, channels, fmt_dtype(img->dtype), fmt_tshape(img));
  *c = (int)img->shape[0];
  *h = img->shape[1];
  *w = img->shape[2];
  if (*h <= 0 || *w <= 0 || *h * *w > DL_IMAGE_MAX_PIXELS)
    return dl_errp(EM_IMG_INPUT, op, channels, fmt_dtype(img->dtype), fmt_tshape(img));
  size_t n = (size_t)(*h * *w * *c);
  uint8_t *out = malloc(n);
  if (!out) return dl_errp(EM_NOMEM, op, (long long)n, 0LL);
  const uint8_t *base = (const uint8_t *)tensor_first(img);
  int64_t sc = img->stride[0], sy = img->stride[1], sx = img->stride[2];
  size_t k = 0;
  for (int64_t y = 0; y < *h; y++)
    for (int64_t x = 0; x < *w; x++)
      for (int ch = 0; ch < *c; ch++) out[k++] = base[ch * sc + y * sy + x * sx];
  return out;
}

static dl_tensor *bytes_tensor(const void *p, size_t n) {
  int64_t len = (int64_t)n;
  dl_tensor *t = dl_empty(&len, 1, DL_UINT8);
  if (t && n) memcpy(tensor_first(t), p, n);
  return t;
}

/* -- PNG ------------------------------------------------------------------------------ */

typedef struct {
  char msg[IMAGE_MSG];  /* first: image_png_fail writes it */
  uint8_t *p;
  size_t n, cap;
} png_sink;

static void sink_write(png_structp png, png_bytep data, size_t len) {
  png_sink *s = png_get_io_ptr(png);
  if (s->n + len > s->cap) {
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < s->n + len) cap *= 2;
    uint8_t *p = realloc(s->p, cap);
    if (!p) png_error(png, "out of memory for the encoded image");
    s->p = p;
    s->cap = cap;
  }
  memcpy(s->p + s->n, data, len);
  s->n += len;
}

static void sink_flush(png_structp png) { (void)png; }

DL_API dl_tensor *dl_image_encode_png(const dl_tensor *img, int level) {
  const char *op = "encode_png";
  if (level < 0 || level > 9) return dl_errp(EM_BADVALUE, op, "compression level must be 0 to 9");
  int64_t h, w;
  int c;
  uint8_t *px = interleave(op, img, "1, 2, 3 or 4", 1, 4, &h, &w, &c);
  if (!px) return NULL;
  png_sink s = {0};
  png_bytep *volatile rows = NULL;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &s, image_png_fail, image_png_warn);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!info) {
    png_destroy_write_struct(png ? &png : NULL, NULL);
    free(px);
    return dl_errp(EM_NOMEM, op, (long long)sizeof(png_struct *), 0LL);
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    free(px);
    free(rows);
    free(s.p);
    return dl_errp(EM_BADVALUE, op, s.msg);
  }
  static const int types[5] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB,
                               PNG_COLOR_TYPE_RGB_ALPHA};
  png_set_write_fn(png, &s, sink_write, sink_flush);
  png_set_compression_level(png, level);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, types[c], PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  rows = malloc(sizeof(png_bytep) * (size_t)h);
  if (!rows) png_error(png, "out of memory for the rows");
  for (int64_t y = 0; y < h; y++) rows[y] = px + (size_t)(y * w * c);
  png_set_rows(png, info, rows);
  png_write_png(png, info, PNG_TRANSFORM_IDENTITY, NULL);
  png_destroy_write_struct(&png, &info);
  free(px);
  free(rows);
  dl_tensor *t = bytes_tensor(s.p, s.n);
  free(s.p);
  return t;
}

/* -- JPEG ----------------------------------------------------------------------------- */

typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  char msg[JMSG_LENGTH_MAX];
} jpeg_wr_err;

static void jpeg_wr_fail(j_common_ptr c) {
  jpeg_wr_err *e = (jpeg_wr_err *)c->err;
  c->err->format_message(c, e->msg);
  longjmp(e->jump, 1);
}

DL_API dl_tensor *dl_image_encode_jpeg(const dl_tensor *img, int quality) {
  const char *op = "encode_jpeg";
  if (quality < 1 || quality > 100) return dl_errp(EM_BADVALUE, op, "quality must be 1 to 100");
  int64_t h, w;
  int c;
  if (img && img->ndim == 3 && img->shape[0] != 1 && img->shape[0] != 3)
    return dl_errp(EM_IMG_INPUT, op, "1 or 3", fmt_dtype(img->dtype), fmt_tshape(img));
  uint8_t *px = interleave(op, img, "1 or 3", 1, 3, &h, &w, &c);
  if (!px) return NULL;
  if (w > JPEG_MAX_DIMENSION || h > JPEG_MAX_DIMENSION) {
    free(px);
    return dl_errp(EM_IMG_INPUT, op, "1 or 3 (and sides up to 65500)", fmt_dtype(img->dtype), fmt_tshape(img));
  }
  struct jpeg_compress_struct cinfo;
  jpeg_wr_err e = {0};
  unsigned char *volatile out = NULL;
  unsigned long out_n = 0;
  cinfo.err = jpeg_std_error(&e.pub);
  e.pub.error_exit = jpeg_wr_fail;
  if (setjmp(e.jump)) {
    jpeg_destroy_compress(&cinfo);
    free(px);
    free(out);
    return dl_errp(EM_BADVALUE, op, e.msg);
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, (unsigned char **)&out, &out_n);
  cinfo.image_width = (JDIMENSION)w;
  cinfo.image_height = (JDIMENSION)h;
  cinfo.input_components = c;
  cinfo.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = px + (size_t)cinfo.next_scanline * (size_t)(w * c);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  free(px);
  dl_tensor *t = bytes_tensor(out, out_n);
  free(out);
  return t;
}
