/* Drives libferrax.so through its C ABI the way a program in another language would: dlopen,
 * every function resolved with dlsym and typed by ferrax.h's prototypes, LAPACK loaded from
 * scipy-openblas32. Usage: capi_check LIBFERRAX LIBSCIPY_OPENBLAS OUTDIR.
 *
 * Every case runs once per layout on the same logical input (batch BATCH, leading dimensions
 * larger than needed, the padding filled with SENTINEL). Each input and output buffer is written
 * whole, padding included, to OUTDIR/<case>.<row|col>.<role>.bin (raw, in the machine's byte
 * order: little-endian on ferrax's targets), with a line "name dtype shape layout ld" in
 * OUTDIR/manifest.txt; tests/test_capi.py checks the numbers. The error paths' messages go to
 * OUTDIR/errors.txt. The exit status is non-zero on any unexpected return code, LAPACK info or
 * error-path behaviour.
 */
#include <complex.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferrax.h"

enum { BATCH = 3 };
/* Fills padding and not-yet-written outputs; tests/test_capi.py expects the same value. */
#define SENTINEL (-12345.0)

/* The functions used, resolved at run time and typed by the header's prototypes. */
#define FERRAX_FUNCTIONS(X)                                                                      \
  X(abi_version) X(last_error) X(lapack_load_library) X(lapack_missing_count) X(dgetrf)          \
  X(zgetrf) X(dgeqrf) X(dorgqr) X(dpotrf) X(dtrsm) X(dgesdd) X(dsyevd) X(zheevd) \
  X(dgeev) X(zgeev) X(dgees) X(zgees)
#define DECLARE(name) __typeof__(ferrax_##name) *name;
static struct {
  FERRAX_FUNCTIONS(DECLARE)
} fx;

static const char *outdir;
static FILE *manifest, *errors;
static int failures;

static void fail(const char *format, ...) {
  va_list args;
  va_start(args, format);
  fputs("capi_check: ", stderr);
  vfprintf(stderr, format, args);
  fputc('\n', stderr);
  va_end(args);
  failures++;
}

static FILE *open_output(const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", outdir, name);
  FILE *file = fopen(path, "wb");
  if (!file) {
    perror(path);
    exit(2);
  }
  return file;
}

/* ---- Buffers: a batch of matrices in one layout, or a contiguous batch of vectors. ---- */

typedef enum { F8, C16, I4 } Kind;
static const char *const KIND_NAME[] = {"f8", "c16", "i4"};
static const size_t KIND_SIZE[] = {sizeof(double), sizeof(ferrax_complex_double), sizeof(int32_t)};

typedef struct {
  Kind kind;
  int layout; /* FERRAX_ROW_MAJOR, FERRAX_COL_MAJOR, or 0 for BATCH vectors of `cols` */
  int rows, cols, ld;
  size_t count; /* elements, padding included */
  void *data;
} Buf;

static Buf buf_new(Kind kind, int layout, int rows, int cols, int ld) {
  Buf buf = {kind, layout, rows, cols, ld, 0, NULL};
  buf.count = (size_t)BATCH * ld * (layout == FERRAX_COL_MAJOR ? cols : rows);
  buf.data = malloc(buf.count * KIND_SIZE[kind]);
  if (!buf.data) {
    perror("malloc");
    exit(2);
  }
  for (size_t i = 0; i < buf.count; i++) {
    switch (kind) {
    case F8: ((double *)buf.data)[i] = SENTINEL; break;
    case C16: ((ferrax_complex_double *)buf.data)[i] = CMPLX(SENTINEL, SENTINEL); break;
    case I4: ((int32_t *)buf.data)[i] = (int32_t)SENTINEL; break;
    }
  }
  return buf;
}

/* `pad` more than the minimal leading dimension, so strides and padding are exercised. */
static Buf matrix(Kind kind, int layout, int rows, int cols, int pad) {
  return buf_new(kind, layout, rows, cols, (layout == FERRAX_COL_MAJOR ? rows : cols) + pad);
}

static Buf vector(Kind kind, int len) { return buf_new(kind, 0, 1, len, len); }

static size_t offset(const Buf *m, int b, int i, int j) {
  int col_major = m->layout == FERRAX_COL_MAJOR;
  size_t major = col_major ? j : i, minor = col_major ? i : j;
  return ((size_t)b * (col_major ? m->cols : m->rows) + major) * m->ld + minor;
}

static double *dat(Buf *m, int b, int i, int j) { return (double *)m->data + offset(m, b, i, j); }

static uint64_t lcg_state;

/* Uniform in (-1, 1) and never zero: odd multiples of 2^-52, minus one. */
static double uniform(void) {
  lcg_state = lcg_state * 6364136223846793005u + 1442695040888963407u;
  return (double)((lcg_state >> 11) | 1) * 0x1p-52 - 1.0;
}

/* Fills the logical entries in (batch, row, column) order, so both layouts get the same input. */
static void fill(Buf *m, uint64_t seed) {
  lcg_state = seed;
  for (int b = 0; b < BATCH; b++)
    for (int i = 0; i < m->rows; i++)
      for (int j = 0; j < m->cols; j++) {
        size_t at = offset(m, b, i, j);
        if (m->kind == C16) {
          double re = uniform();
          ((ferrax_complex_double *)m->data)[at] = CMPLX(re, uniform());
        } else {
          ((double *)m->data)[at] = uniform();
        }
      }
}

static const char *layout_name(int layout) {
  return layout == FERRAX_ROW_MAJOR ? "row" : layout == FERRAX_COL_MAJOR ? "col" : "vec";
}

static void save(const char *case_name, int layout, const char *role, const Buf *m) {
  char name[256], file[300];
  snprintf(name, sizeof name, "%s.%s.%s", case_name, layout_name(layout), role);
  snprintf(file, sizeof file, "%s.bin", name);
  FILE *out = open_output(file);
  if (fwrite(m->data, KIND_SIZE[m->kind], m->count, out) != m->count || fclose(out) != 0) {
    perror(file);
    exit(2);
  }
  if (m->layout)
    fprintf(manifest, "%s %s %d,%d,%d %s %d\n", name, KIND_NAME[m->kind], BATCH, m->rows, m->cols,
            layout_name(m->layout), m->ld);
  else
    fprintf(manifest, "%s %s %d,%d vec %d\n", name, KIND_NAME[m->kind], BATCH, m->cols, m->ld);
}

static void check(int rc, const char *case_name, int layout) {
  if (rc != 0)
    fail("%s (%s): returned %d: %s", case_name, layout_name(layout), rc, fx.last_error());
}

static void check_info(const Buf *info, const char *case_name, int layout) {
  for (int b = 0; b < BATCH; b++)
    if (((int32_t *)info->data)[b] != 0)
      fail("%s (%s): info[%d] = %d", case_name, layout_name(layout), b,
           ((int32_t *)info->data)[b]);
}

static int min(int a, int b) { return a < b ? a : b; }

/* ---- The cases: each runs in one layout and saves its inputs and outputs. ---- */

static void getrf_case(int layout, Kind kind, int m, int n, uint64_t seed) {
  char name[64];
  snprintf(name, sizeof name, "%sgetrf_%dx%d", kind == C16 ? "z" : "", m, n);
  Buf a = matrix(kind, layout, m, n, 3), ipiv = vector(I4, min(m, n)), info = vector(I4, 1);
  fill(&a, seed);
  save(name, layout, "a_in", &a);
  check(kind == C16 ? fx.zgetrf(layout, BATCH, m, n, a.data, a.ld, ipiv.data, info.data)
                    : fx.dgetrf(layout, BATCH, m, n, a.data, a.ld, ipiv.data, info.data),
        name, layout);
  check_info(&info, name, layout);
  save(name, layout, "a_out", &a);
  save(name, layout, "ipiv", &ipiv);
  free(a.data), free(ipiv.data), free(info.data);
}

/* geqrf, then (for m >= n) orgqr in place on its output to form Q. */
static void qr_case(int layout, int m, int n, uint64_t seed) {
  char name[64];
  snprintf(name, sizeof name, "qr_%dx%d", m, n);
  int k = min(m, n);
  Buf a = matrix(F8, layout, m, n, 3), tau = vector(F8, k);
  fill(&a, seed);
  save(name, layout, "a_in", &a);
  check(fx.dgeqrf(layout, BATCH, m, n, a.data, a.ld, tau.data), name, layout);
  save(name, layout, "a_out", &a);
  save(name, layout, "tau", &tau);
  if (m >= n) {
    check(fx.dorgqr(layout, BATCH, m, n, k, a.data, a.ld, tau.data), name, layout);
    save(name, layout, "q", &a);
  }
  free(a.data), free(tau.data);
}

/* Cholesky of A = M M^T + n I, whole matrix stored (the other triangle must be left alone). */
static void potrf_case(int layout, char uplo, uint64_t seed) {
  enum { N = 4 };
  char name[64];
  snprintf(name, sizeof name, "potrf_%c", uplo);
  Buf m = matrix(F8, layout, N, N, 0), a = matrix(F8, layout, N, N, 3), info = vector(I4, 1);
  fill(&m, seed);
  for (int b = 0; b < BATCH; b++)
    for (int i = 0; i < N; i++)
      for (int j = 0; j < N; j++) {
        double sum = i == j ? N : 0;
        for (int l = 0; l < N; l++) sum += *dat(&m, b, i, l) * *dat(&m, b, j, l);
        *dat(&a, b, i, j) = sum;
      }
  save(name, layout, "a_in", &a);
  check(fx.dpotrf(layout, BATCH, uplo, N, a.data, a.ld, info.data), name, layout);
  check_info(&info, name, layout);
  save(name, layout, "a_out", &a);
  free(m.data), free(a.data), free(info.data);
}

/* B is 4 x 3; A (the ignored triangle and unit diagonal full of noise) gets 3 added to its
 * diagonal to stay well conditioned. lda and ldb differ so that a mix-up shows. */
static void trsm_case(int layout, const char flags[4], uint64_t seed) {
  enum { M = 4, N = 3 };
  char name[64];
  snprintf(name, sizeof name, "trsm_%.4s", flags);
  int k = flags[0] == 'L' ? M : N;
  Buf a = matrix(F8, layout, k, k, 3), b = matrix(F8, layout, M, N, 2);
  fill(&a, seed);
  fill(&b, seed + 1);
  for (int batch = 0; batch < BATCH; batch++)
    for (int i = 0; i < k; i++) *dat(&a, batch, i, i) += 3;
  save(name, layout, "a_in", &a);
  save(name, layout, "b_in", &b);
  check(fx.dtrsm(layout, BATCH, flags[0], flags[1], flags[2], flags[3], M, N, a.data, a.ld, b.data,
                 b.ld),
        name, layout);
  save(name, layout, "a_out", &a);
  save(name, layout, "b_out", &b);
  free(a.data), free(b.data);
}

/* jobz 'A' and 'S' save U and V^T; 'N' passes null for both. */
static void gesdd_case(int layout, char jobz, int m, int n, uint64_t seed) {
  char name[64];
  snprintf(name, sizeof name, "gesdd_%c_%dx%d", jobz, m, n);
  int k = min(m, n), wanted = jobz != 'N';
  Buf a = matrix(F8, layout, m, n, 3), s = vector(F8, k), info = vector(I4, 1);
  Buf u = matrix(F8, layout, m, jobz == 'A' ? m : k, 2);
  Buf vt = matrix(F8, layout, jobz == 'A' ? n : k, n, 2);
  fill(&a, seed);
  save(name, layout, "a_in", &a);
  check(fx.dgesdd(layout, BATCH, jobz, m, n, a.data, a.ld, s.data, wanted ? u.data : NULL,
                  wanted ? u.ld : 1, wanted ? vt.data : NULL, wanted ? vt.ld : 1, info.data),
        name, layout);
  check_info(&info, name, layout);
  save(name, layout, "a_out", &a);
  save(name, layout, "s", &s);
  if (wanted) {
    save(name, layout, "u", &u);
    save(name, layout, "vt", &vt);
  }
  free(a.data), free(s.data), free(info.data), free(u.data), free(vt.data);
}

/* The input is not symmetric: only the `uplo` triangle may be read. */
static void syevd_case(int layout, Kind kind, char jobz, char uplo, uint64_t seed) {
  enum { N = 4 };
  char name[64];
  snprintf(name, sizeof name, "%s_%c%c", kind == C16 ? "zheevd" : "syevd", jobz, uplo);
  Buf a = matrix(kind, layout, N, N, 3), w = vector(F8, N), info = vector(I4, 1);
  fill(&a, seed);
  save(name, layout, "a_in", &a);
  check(kind == C16 ? fx.zheevd(layout, BATCH, jobz, uplo, N, a.data, a.ld, w.data, info.data)
                    : fx.dsyevd(layout, BATCH, jobz, uplo, N, a.data, a.ld, w.data, info.data),
        name, layout);
  check_info(&info, name, layout);
  save(name, layout, "a_out", &a);
  save(name, layout, "w", &w);
  free(a.data), free(w.data), free(info.data);
}

/* jobvl / jobvr 'N' pass null for those vectors; `a` must come back as it was. */
static void geev_case(int layout, Kind kind, char jobvl, char jobvr, uint64_t seed) {
  enum { N = 4 };
  char name[64];
  snprintf(name, sizeof name, "%sgeev_%c%c", kind == C16 ? "z" : "d", jobvl, jobvr);
  Buf a = matrix(kind, layout, N, N, 3), w = vector(C16, N), info = vector(I4, 1);
  Buf vl = matrix(C16, layout, N, N, 2), vr = matrix(C16, layout, N, N, 1);
  int left = jobvl == 'V', right = jobvr == 'V';
  fill(&a, seed);
  save(name, layout, "a_in", &a);
  void *vl_data = left ? vl.data : NULL, *vr_data = right ? vr.data : NULL;
  int ldvl = left ? vl.ld : 1, ldvr = right ? vr.ld : 1;
  check(kind == C16 ? fx.zgeev(layout, BATCH, jobvl, jobvr, N, a.data, a.ld, w.data, vl_data,
                               ldvl, vr_data, ldvr, info.data)
                    : fx.dgeev(layout, BATCH, jobvl, jobvr, N, a.data, a.ld, w.data, vl_data,
                               ldvl, vr_data, ldvr, info.data),
        name, layout);
  check_info(&info, name, layout);
  save(name, layout, "a_out", &a);
  save(name, layout, "w", &w);
  if (left) save(name, layout, "vl", &vl);
  if (right) save(name, layout, "vr", &vr);
  free(a.data), free(w.data), free(info.data), free(vl.data), free(vr.data);
}

/* T overwrites `a`; jobvs 'N' passes null for the Schur vectors. */
static void gees_case(int layout, Kind kind, char jobvs, uint64_t seed) {
  enum { N = 4 };
  char name[64];
  snprintf(name, sizeof name, "%sgees_%c", kind == C16 ? "z" : "d", jobvs);
  Buf a = matrix(kind, layout, N, N, 3), w = vector(C16, N), info = vector(I4, 1);
  Buf vs = matrix(kind, layout, N, N, 2);
  int wanted = jobvs == 'V';
  fill(&a, seed);
  save(name, layout, "a_in", &a);
  void *vs_data = wanted ? vs.data : NULL;
  int ldvs = wanted ? vs.ld : 1;
  check(kind == C16 ? fx.zgees(layout, BATCH, jobvs, N, a.data, a.ld, w.data, vs_data, ldvs,
                               info.data)
                    : fx.dgees(layout, BATCH, jobvs, N, a.data, a.ld, w.data, vs_data, ldvs,
                               info.data),
        name, layout);
  check_info(&info, name, layout);
  save(name, layout, "a_out", &a);
  save(name, layout, "w", &w);
  if (wanted) save(name, layout, "vs", &vs);
  free(a.data), free(w.data), free(info.data), free(vs.data);
}

/* A call that must fail: -1, a message, and no buffer touched. */
static void expect_error(const char *name, int rc, const Buf *a, const void *before) {
  const char *message = fx.last_error();
  fprintf(errors, "%s %d %s\n", name, rc, message);
  if (rc != -1 || message[0] == '\0')
    fail("%s: returned %d with message \"%s\"; expected -1 and a message", name, rc, message);
  if (memcmp(a->data, before, a->count * KIND_SIZE[a->kind]) != 0)
    fail("%s: a failed call modified its matrix", name);
}

static void error_cases(void) {
  Buf a = matrix(F8, FERRAX_COL_MAJOR, 5, 4, 0), ipiv = vector(I4, 4), info = vector(I4, 1);
  fill(&a, 99);
  size_t bytes = a.count * KIND_SIZE[F8];
  void *before = malloc(bytes);
  if (!before) {
    perror("malloc");
    exit(2);
  }
  memcpy(before, a.data, bytes);
  expect_error("bad_layout", fx.dgetrf(100, BATCH, 5, 4, a.data, 5, ipiv.data, info.data), &a,
               before);
  expect_error("small_lda_col",
               fx.dgetrf(FERRAX_COL_MAJOR, BATCH, 5, 4, a.data, 4, ipiv.data, info.data), &a,
               before);
  expect_error("small_lda_row",
               fx.dgetrf(FERRAX_ROW_MAJOR, BATCH, 5, 4, a.data, 3, ipiv.data, info.data), &a,
               before);
  free(before), free(a.data), free(ipiv.data), free(info.data);
}

static void *resolve(void *library, const char *name) {
  void *symbol = dlsym(library, name);
  if (!symbol) {
    fprintf(stderr, "capi_check: dlsym(%s): %s\n", name, dlerror());
    exit(2);
  }
  return symbol;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s LIBFERRAX LIBSCIPY_OPENBLAS OUTDIR\n", argv[0]);
    return 2;
  }
  void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    fprintf(stderr, "capi_check: dlopen: %s\n", dlerror());
    return 2;
  }
#define RESOLVE(name) fx.name = (__typeof__(fx.name))resolve(library, "ferrax_" #name);
  FERRAX_FUNCTIONS(RESOLVE)
  if (fx.abi_version() != FERRAX_ABI_VERSION) {
    fprintf(stderr, "capi_check: ABI version %u, header has %d\n", fx.abi_version(),
            FERRAX_ABI_VERSION);
    return 2;
  }
  char error[512];
  if (fx.lapack_load_library(argv[2], error, sizeof error) <= 0) {
    fprintf(stderr, "capi_check: ferrax_lapack_load_library: %s\n", error);
    return 2;
  }
  if (fx.lapack_missing_count() != 0)
    fail("%zu LAPACK routines still missing after loading %s", fx.lapack_missing_count(), argv[2]);
  outdir = argv[3];
  manifest = open_output("manifest.txt");
  errors = open_output("errors.txt");

  static const char *const trsm_flags[] = {"LLNN", "LUTU", "RUNN", "RLTU", "LUCN"};
  const int layouts[] = {FERRAX_ROW_MAJOR, FERRAX_COL_MAJOR};
  for (int l = 0; l < 2; l++) {
    int layout = layouts[l];
    getrf_case(layout, F8, 5, 4, 1);
    getrf_case(layout, F8, 4, 5, 2);
    getrf_case(layout, C16, 5, 4, 3);
    qr_case(layout, 5, 4, 4);
    qr_case(layout, 4, 5, 5);
    potrf_case(layout, 'L', 6);
    potrf_case(layout, 'U', 7);
    for (int t = 0; t < 5; t++) trsm_case(layout, trsm_flags[t], 10 + 2 * t);
    gesdd_case(layout, 'A', 5, 4, 20);
    gesdd_case(layout, 'S', 4, 5, 21);
    gesdd_case(layout, 'N', 5, 4, 22);
    syevd_case(layout, F8, 'V', 'L', 30);
    syevd_case(layout, F8, 'N', 'U', 31);
    syevd_case(layout, C16, 'V', 'U', 32);
    syevd_case(layout, C16, 'N', 'L', 33);
    geev_case(layout, F8, 'V', 'V', 40);
    geev_case(layout, F8, 'N', 'V', 41);
    geev_case(layout, F8, 'V', 'N', 42);
    geev_case(layout, F8, 'N', 'N', 43);
    geev_case(layout, C16, 'V', 'V', 44);
    geev_case(layout, C16, 'V', 'N', 45);
    geev_case(layout, C16, 'N', 'V', 46);
    geev_case(layout, C16, 'N', 'N', 47);
    gees_case(layout, F8, 'V', 50);
    gees_case(layout, F8, 'N', 51);
    gees_case(layout, C16, 'V', 52);
    gees_case(layout, C16, 'N', 53);
  }
  error_cases();
  if (fclose(manifest) != 0 || fclose(errors) != 0) {
    perror("capi_check: closing outputs");
    return 2;
  }
  return failures ? 1 : 0;
}
