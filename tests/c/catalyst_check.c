/* Calls libferrax.so's Catalyst-compatible entry points (lapack_<t><op>_ffi) the way code
 * compiled by PennyLane Catalyst does: `data` and `results` are arrays of pointers to
 * EncodedMemref { rank, data_aligned, dtype }; the custom call's attributes (alphabetical) and
 * each operand's sizes come first as rank-0 tensors (int32 sizes, uint8 flags), then the
 * operands, row-major, batch BATCH. Usage: catalyst_check LIBFERRAX LIBSCIPY_OPENBLAS OUTDIR.
 *
 * Every buffer is written to OUTDIR/<case>.<role>.bin (raw, little-endian) with a line
 * "name dtype shape" in OUTDIR/manifest.txt; tests/test_catalyst.py checks the numbers.
 * Invalid calls go to OUTDIR/errors.txt as "case info first_output_is_nan message".
 */
#include <complex.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferrax.h"

enum { BATCH = 2, MAX_ARGS = 16 };

typedef __typeof__(lapack_dgetrf_ffi) CatalystFn;

typedef struct {
  int64_t rank;
  void *data_aligned;
  int8_t dtype;
} EncodedMemref;

/* One argument list; scalars live inside it, so it must not be copied once filled. */
typedef struct {
  EncodedMemref memrefs[MAX_ARGS];
  void *entries[MAX_ARGS];
  int32_t ints[MAX_ARGS];
  uint8_t flags[MAX_ARGS];
  int count;
} List;

static void push(List *list, int64_t rank, void *data) {
  int i = list->count++;
  list->memrefs[i] = (EncodedMemref){rank, data, 0};
  list->entries[i] = &list->memrefs[i];
}
static void push_int(List *list, int32_t value) {
  list->ints[list->count] = value;
  push(list, 0, &list->ints[list->count]);
}
static void push_flag(List *list, char value) {
  list->flags[list->count] = (uint8_t)value;
  push(list, 0, &list->flags[list->count]);
}
/* What Catalyst's lowering adds for a rank >= 2 operand: batch, rows, cols. */
static void push_sizes(List *list, int rows, int cols) {
  push_int(list, BATCH);
  push_int(list, rows);
  push_int(list, cols);
}

static void *library;
static const char *outdir;
static FILE *manifest, *errors;

static CatalystFn *resolve(const char *name) {
  CatalystFn *fn = (CatalystFn *)dlsym(library, name);
  if (!fn) {
    fprintf(stderr, "catalyst_check: %s: %s\n", name, dlerror());
    exit(2);
  }
  return fn;
}

static void call(const char *name, List *data, List *results) {
  resolve(name)(data->entries, results->entries);
}

static void *alloc(size_t bytes) {
  void *p = calloc(bytes ? bytes : 1, 1);
  if (!p) {
    perror("calloc");
    exit(2);
  }
  return p;
}
static double *f8(size_t n) { return alloc(n * sizeof(double)); }
static double complex *c16(size_t n) { return alloc(n * sizeof(double complex)); }
static int32_t *i4(size_t n) { return alloc(n * sizeof(int32_t)); }

/* Deterministic inputs in [-1, 1). */
static unsigned long long state = 0x9E3779B97F4A7C15ull;
static double uniform(void) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}
static double *random_f8(size_t n) {
  double *p = f8(n);
  for (size_t i = 0; i < n; i++) p[i] = uniform();
  return p;
}
static double complex *random_c16(size_t n) {
  double complex *p = c16(n);
  for (size_t i = 0; i < n; i++) p[i] = uniform() + uniform() * I;
  return p;
}

/* Saves `data` (dtype "f8", "c16" or "i4", shape e.g. "2,4,3") as OUTDIR/name.bin. */
static void save(const char *name, const char *dtype, const char *shape, const void *data) {
  size_t count = 1, size = strcmp(dtype, "f8") == 0 ? 8 : strcmp(dtype, "c16") == 0 ? 16 : 4;
  for (const char *s = shape; *s; s++) {
    if (s == shape || s[-1] == ',') count *= strtoul(s, NULL, 10);
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.bin", outdir, name);
  FILE *file = fopen(path, "wb");
  if (!file || fwrite(data, size, count, file) != count || fclose(file) != 0) {
    perror(path);
    exit(2);
  }
  fprintf(manifest, "%s %s %s\n", name, dtype, shape);
}

static void getrf_case(const char *name, const char *fn, int complex_, int m, int n) {
  size_t len = (size_t)BATCH * m * n;
  void *a = complex_ ? (void *)random_c16(len) : (void *)random_f8(len);
  void *lu = complex_ ? (void *)c16(len) : (void *)f8(len);
  int32_t *ipiv = i4((size_t)BATCH * (m < n ? m : n)), *info = i4(BATCH);
  List data = {0}, out = {0};
  push_sizes(&data, m, n);
  push(&data, 3, a);
  push(&out, 3, lu);
  push(&out, 2, ipiv);
  push(&out, 1, info);
  call(fn, &data, &out);
  char role[256], shape[64], kshape[64];
  const char *dtype = complex_ ? "c16" : "f8";
  snprintf(shape, sizeof shape, "%d,%d,%d", BATCH, m, n);
  snprintf(kshape, sizeof kshape, "%d,%d", BATCH, m < n ? m : n);
  snprintf(role, sizeof role, "%s.a_in", name), save(role, dtype, shape, a);
  snprintf(role, sizeof role, "%s.a_out", name), save(role, dtype, shape, lu);
  snprintf(role, sizeof role, "%s.ipiv", name), save(role, "i4", kshape, ipiv);
  snprintf(role, sizeof role, "%s.info", name), save(role, "i4", "2", info);
}

static void qr_cases(void) {
  enum { M = 5, N = 3, K = 3 };
  double *a = random_f8(BATCH * M * N), *qr = f8(BATCH * M * N), *tau = f8(BATCH * K);
  double *q = f8(BATCH * M * N);
  List data = {0}, out = {0};
  push_sizes(&data, M, N);
  push(&data, 3, a);
  push(&out, 3, qr);
  push(&out, 2, tau);
  call("lapack_dgeqrf_ffi", &data, &out);
  /* orgqr with a batched tau (shape BATCH x K): its sizes are 1, BATCH, K. */
  List data2 = {0}, out2 = {0};
  push_sizes(&data2, M, N);
  push_int(&data2, 1);
  push_int(&data2, BATCH);
  push_int(&data2, K);
  push(&data2, 3, qr);
  push(&data2, 2, tau);
  push(&out2, 3, q);
  call("lapack_dorgqr_ffi", &data2, &out2);
  /* orgqr on one matrix, tau a vector: its size is just K. */
  double *q1 = f8(M * N);
  List data3 = {0}, out3 = {0};
  push_int(&data3, 1);
  push_int(&data3, M);
  push_int(&data3, N);
  push_int(&data3, K);
  push(&data3, 2, qr);
  push(&data3, 1, tau);
  push(&out3, 2, q1);
  call("lapack_dorgqr_ffi", &data3, &out3);
  save("qr.a_in", "f8", "2,5,3", a);
  save("qr.a_out", "f8", "2,5,3", qr);
  save("qr.tau", "f8", "2,3", tau);
  save("qr.q", "f8", "2,5,3", q);
  save("qr.q1", "f8", "1,5,3", q1);
}

/* BATCH symmetric (Hermitian) positive definite n x n matrices: X X^H + n I. */
static void *spd(int complex_, int n) {
  size_t len = (size_t)BATCH * n * n;
  if (complex_) {
    double complex *x = random_c16(len), *a = c16(len);
    for (int b = 0; b < BATCH; b++)
      for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
          double complex s = i == j ? n : 0;
          for (int k = 0; k < n; k++) s += x[(b * n + i) * n + k] * conj(x[(b * n + j) * n + k]);
          a[(b * n + i) * n + j] = s;
        }
    free(x);
    return a;
  }
  double *x = random_f8(len), *a = f8(len);
  for (int b = 0; b < BATCH; b++)
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++) {
        double s = i == j ? n : 0;
        for (int k = 0; k < n; k++) s += x[(b * n + i) * n + k] * x[(b * n + j) * n + k];
        a[(b * n + i) * n + j] = s;
      }
  free(x);
  return a;
}

static void potrf_case(void) {
  enum { N = 4 };
  double *a = spd(0, N), *l = f8(BATCH * N * N);
  int32_t *info = i4(BATCH);
  List data = {0}, out = {0};
  push_flag(&data, 'L'); /* attribute uplo */
  push_sizes(&data, N, N);
  push(&data, 3, a);
  push(&out, 3, l);
  push(&out, 1, info);
  call("lapack_dpotrf_ffi", &data, &out);
  save("potrf.a_in", "f8", "2,4,4", a);
  save("potrf.a_out", "f8", "2,4,4", l);
  save("potrf.info", "i4", "2", info);
}

static void trsm_case(void) {
  enum { M = 4, N = 3 };
  double *a = random_f8(BATCH * M * M), *b = random_f8(BATCH * M * N), *x = f8(BATCH * M * N);
  for (int i = 0; i < BATCH * M; i++) a[i * M + i % M] += 4; /* well conditioned */
  List data = {0}, out = {0};
  push_flag(&data, 'N'); /* diag */
  push_flag(&data, 'L'); /* side */
  push_flag(&data, 'T'); /* trans_x */
  push_flag(&data, 'L'); /* uplo */
  push_sizes(&data, M, M);
  push_sizes(&data, M, N);
  push(&data, 3, a);
  push(&data, 3, b);
  push(&out, 3, x);
  call("lapack_dtrsm_ffi", &data, &out);
  save("trsm.a_in", "f8", "2,4,4", a);
  save("trsm.b_in", "f8", "2,4,3", b);
  save("trsm.x", "f8", "2,4,3", x);
}

static void gesdd_case(void) {
  enum { M = 5, N = 3 };
  double *a = random_f8(BATCH * M * N), *a_out = f8(BATCH * M * N), *s = f8(BATCH * N);
  double *u = f8(BATCH * M * N), *vt = f8(BATCH * N * N);
  int32_t *info = i4(BATCH);
  List data = {0}, out = {0};
  push_flag(&data, 'S'); /* mode */
  push_sizes(&data, M, N);
  push(&data, 3, a);
  push(&out, 3, a_out);
  push(&out, 2, s);
  push(&out, 3, u);
  push(&out, 3, vt);
  push(&out, 1, info);
  call("lapack_dgesdd_ffi", &data, &out);
  save("gesdd.a_in", "f8", "2,5,3", a);
  save("gesdd.s", "f8", "2,3", s);
  save("gesdd.u", "f8", "2,5,3", u);
  save("gesdd.vt", "f8", "2,3,3", vt);
  save("gesdd.info", "i4", "2", info);
}

static void syevd_case(const char *name, const char *fn, int complex_, char uplo) {
  enum { N = 4 };
  size_t len = BATCH * N * N;
  void *a = complex_ ? (void *)random_c16(len) : (void *)random_f8(len);
  void *v = complex_ ? (void *)c16(len) : (void *)f8(len);
  double *w = f8(BATCH * N);
  int32_t *info = i4(BATCH);
  List data = {0}, out = {0};
  push_flag(&data, 'V'); /* mode */
  push_flag(&data, uplo);
  push_sizes(&data, N, N);
  push(&data, 3, a);
  push(&out, 3, v);
  push(&out, 2, w);
  push(&out, 1, info);
  call(fn, &data, &out);
  char role[256];
  const char *dtype = complex_ ? "c16" : "f8";
  snprintf(role, sizeof role, "%s.a_in", name), save(role, dtype, "2,4,4", a);
  snprintf(role, sizeof role, "%s.v", name), save(role, dtype, "2,4,4", v);
  snprintf(role, sizeof role, "%s.w", name), save(role, "f8", "2,4", w);
  snprintf(role, sizeof role, "%s.info", name), save(role, "i4", "2", info);
}

static void eig_cases(void) {
  enum { N = 4 };
  double *a = random_f8(BATCH * N * N), *wr = f8(BATCH * N), *wi = f8(BATCH * N);
  double complex *vl = c16(BATCH * N * N), *vr = c16(BATCH * N * N);
  int32_t *info = i4(BATCH);
  List data = {0}, out = {0};
  push_flag(&data, 'V'); /* compute_left */
  push_flag(&data, 'V'); /* compute_right */
  push_sizes(&data, N, N);
  push(&data, 3, a);
  push(&out, 2, wr);
  push(&out, 2, wi);
  push(&out, 3, vl);
  push(&out, 3, vr);
  push(&out, 1, info);
  call("lapack_dgeev_ffi", &data, &out);
  save("geev.a_in", "f8", "2,4,4", a);
  save("geev.wr", "f8", "2,4", wr);
  save("geev.wi", "f8", "2,4", wi);
  save("geev.vl", "c16", "2,4,4", vl);
  save("geev.vr", "c16", "2,4,4", vr);
  save("geev.info", "i4", "2", info);

  double complex *za = random_c16(BATCH * N * N), *zw = c16(BATCH * N);
  double complex *zvl = c16(BATCH * N * N), *zvr = c16(BATCH * N * N);
  int32_t *zinfo = i4(BATCH);
  List zdata = {0}, zout = {0};
  push_flag(&zdata, 'N');
  push_flag(&zdata, 'V');
  push_sizes(&zdata, N, N);
  push(&zdata, 3, za);
  push(&zout, 2, zw);
  push(&zout, 3, zvl);
  push(&zout, 3, zvr);
  push(&zout, 1, zinfo);
  call("lapack_zgeev_ffi", &zdata, &zout);
  save("zgeev.a_in", "c16", "2,4,4", za);
  save("zgeev.w", "c16", "2,4", zw);
  save("zgeev.vr", "c16", "2,4,4", zvr);
  save("zgeev.info", "i4", "2", zinfo);

  double *t = f8(BATCH * N * N), *vs = f8(BATCH * N * N), *sr = f8(BATCH * N);
  double *si = f8(BATCH * N);
  int32_t *sdim = i4(BATCH), *sinfo = i4(BATCH);
  List sdata = {0}, sout = {0};
  push_flag(&sdata, 'V'); /* mode */
  push_flag(&sdata, 'N'); /* sort */
  push_sizes(&sdata, N, N);
  push(&sdata, 3, a);
  push(&sout, 3, t);
  push(&sout, 3, vs);
  push(&sout, 2, sr);
  push(&sout, 2, si);
  push(&sout, 1, sdim);
  push(&sout, 1, sinfo);
  call("lapack_dgees_ffi", &sdata, &sout);
  save("gees.t", "f8", "2,4,4", t);
  save("gees.vs", "f8", "2,4,4", vs);
  save("gees.wr", "f8", "2,4", sr);
  save("gees.wi", "f8", "2,4", si);
  save("gees.sdim", "i4", "2", sdim);
  save("gees.info", "i4", "2", sinfo);
}

static void reduction_cases(void) {
  enum { N = 5 };
  double *a = random_f8(BATCH * N * N), *h = f8(BATCH * N * N), *tau = f8(BATCH * (N - 1));
  int32_t *info = i4(BATCH);
  List data = {0}, out = {0};
  push_int(&data, N); /* attribute high (ihi) */
  push_int(&data, 1); /* attribute low (ilo) */
  push_sizes(&data, N, N);
  push(&data, 3, a);
  push(&out, 3, h);
  push(&out, 2, tau);
  push(&out, 1, info);
  call("lapack_dgehrd_ffi", &data, &out);
  save("gehrd.a_in", "f8", "2,5,5", a);
  save("gehrd.a_out", "f8", "2,5,5", h);
  save("gehrd.tau", "f8", "2,4", tau);
  save("gehrd.info", "i4", "2", info);

  double complex *z = random_c16(BATCH * N * N), *zt = c16(BATCH * N * N);
  double complex *ztau = c16(BATCH * (N - 1));
  double *d = f8(BATCH * N), *e = f8(BATCH * (N - 1));
  int32_t *zinfo = i4(BATCH);
  List zdata = {0}, zout = {0};
  push_flag(&zdata, 'L'); /* uplo */
  push_sizes(&zdata, N, N);
  push(&zdata, 3, z);
  push(&zout, 3, zt);
  push(&zout, 2, d);
  push(&zout, 2, e);
  push(&zout, 2, ztau);
  push(&zout, 1, zinfo);
  call("lapack_zhetrd_ffi", &zdata, &zout);
  save("hetrd.a_in", "c16", "2,5,5", z);
  save("hetrd.a_out", "c16", "2,5,5", zt);
  save("hetrd.d", "f8", "2,5", d);
  save("hetrd.e", "f8", "2,4", e);
  save("hetrd.tau", "c16", "2,4", ztau);
  save("hetrd.info", "i4", "2", zinfo);
}

/* Invalid calls must return, leave a message, and poison what they can size. */
static void error_cases(const char *(*last_error)(void)) {
  enum { M = 3, N = 3 };
  const char *names[] = {"null_entry", "scalar_rank", "bad_flag", "null_lists"};
  for (int which = 0; which < 4; which++) {
    double *a = random_f8(BATCH * M * N), *out_a = f8(BATCH * M * N);
    int32_t *ipiv = i4(BATCH * N), *info = i4(BATCH);
    List data = {0}, out = {0};
    if (which == 2) {
      push_flag(&data, 'X');
    }
    push_sizes(&data, M, N);
    push(&data, 3, a);
    push(&out, 3, out_a);
    if (which != 2) push(&out, 2, ipiv);
    push(&out, 1, info);
    if (which == 0) data.entries[3] = NULL;
    if (which == 1) data.memrefs[1].rank = 1;
    if (which == 3) {
      resolve("lapack_dgetrf_ffi")(NULL, NULL);
    } else {
      call(which == 2 ? "lapack_dpotrf_ffi" : "lapack_dgetrf_ffi", &data, &out);
    }
    fprintf(errors, "%s %d %d %s\n", names[which], (int)info[0], isnan(out_a[0]) ? 1 : 0,
            last_error());
    free(a), free(out_a), free(ipiv), free(info);
  }
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s LIBFERRAX LIBSCIPY_OPENBLAS OUTDIR\n", argv[0]);
    return 2;
  }
  outdir = argv[3];
  library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    fprintf(stderr, "catalyst_check: %s\n", dlerror());
    return 2;
  }
  __typeof__(ferrax_lapack_load_library) *load =
      (__typeof__(ferrax_lapack_load_library) *)dlsym(library, "ferrax_lapack_load_library");
  __typeof__(ferrax_last_error) *last_error =
      (__typeof__(ferrax_last_error) *)dlsym(library, "ferrax_last_error");
  char message[1024];
  if (!load || !last_error || load(argv[2], message, sizeof message) < 0) {
    fprintf(stderr, "catalyst_check: loading LAPACK failed: %s\n", load ? message : dlerror());
    return 2;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/manifest.txt", outdir);
  manifest = fopen(path, "w");
  snprintf(path, sizeof path, "%s/errors.txt", outdir);
  errors = fopen(path, "w");
  if (!manifest || !errors) {
    perror(path);
    return 2;
  }
  getrf_case("getrf", "lapack_dgetrf_ffi", 0, 4, 3);
  getrf_case("zgetrf", "lapack_zgetrf_ffi", 1, 3, 4);
  qr_cases();
  potrf_case();
  trsm_case();
  gesdd_case();
  syevd_case("syevd", "lapack_dsyevd_ffi", 0, 'L');
  syevd_case("heevd", "lapack_zheevd_ffi", 1, 'U');
  eig_cases();
  reduction_cases();
  if (last_error()[0] != '\0') {
    fprintf(stderr, "catalyst_check: unexpected error: %s\n", last_error());
    return 1;
  }
  error_cases(last_error);
  return fclose(manifest) != 0 || fclose(errors) != 0;
}
