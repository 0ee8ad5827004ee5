/* Batched LU through ferrax's C ABI (ferrax_dgetrf), row-major and column-major, as a compiler
 * that links libferrax.so calls it: median wall time of a batch over repeated calls, each on a
 * fresh copy of the same random input (the copy is not timed).
 * Usage: capi_lu LIBFERRAX LIBSCIPY_OPENBLAS [BATCH N REPEATS]  (default 4096 16 51)
 * benches/capi-lu builds and runs it; it prints one table row per layout.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ferrax.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc != 3 && argc != 6) {
    fprintf(stderr, "usage: %s LIBFERRAX LIBSCIPY_OPENBLAS [BATCH N REPEATS]\n", argv[0]);
    return 2;
  }
  long batch = argc == 6 ? atol(argv[3]) : 4096;
  int n = argc == 6 ? atoi(argv[4]) : 16;
  int repeats = argc == 6 ? atoi(argv[5]) : 51;
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  __typeof__(ferrax_lapack_load_library) *load = dlsym(lib, "ferrax_lapack_load_library");
  __typeof__(ferrax_dgetrf) *dgetrf = dlsym(lib, "ferrax_dgetrf");
  __typeof__(ferrax_last_error) *last_error = dlsym(lib, "ferrax_last_error");
  char error[512];
  if (!load || !dgetrf || !last_error || load(argv[2], error, sizeof error) < 0) {
    fprintf(stderr, "loading: %s\n", load ? error : "missing symbols");
    return 1;
  }
  size_t len = (size_t)batch * n * n;
  double *input = malloc(len * sizeof *input), *a = malloc(len * sizeof *a);
  int32_t *ipiv = malloc((size_t)batch * n * sizeof *ipiv), *info = malloc(batch * sizeof *info);
  double *times = malloc(repeats * sizeof *times);
  srand(12345);
  for (size_t i = 0; i < len; i++) input[i] = (double)rand() / RAND_MAX - 0.5;
  printf("%-10s %8s %4s %12s\n", "layout", "batch", "n", "median ms");
  const int layouts[2] = {FERRAX_ROW_MAJOR, FERRAX_COL_MAJOR};
  for (int l = 0; l < 2; l++) {
    for (int r = 0; r < repeats; r++) {
      memcpy(a, input, len * sizeof *a);
      double start = now();
      if (dgetrf(layouts[l], batch, n, n, a, n, ipiv, info) != 0) {
        fprintf(stderr, "ferrax_dgetrf: %s\n", last_error());
        return 1;
      }
      times[r] = now() - start;
    }
    qsort(times, repeats, sizeof *times, compare);
    printf("%-10s %8ld %4d %12.3f\n", l == 0 ? "row-major" : "col-major", batch, n,
           1e3 * times[repeats / 2]);
  }
  return 0;
}
