/* Factor a batch of two row-major 3x3 matrices with ferrax's C ABI (no XLA, no Python).
 *
 *   scripts/install-c /tmp/ferrax
 *   cc examples/lu.c $(PKG_CONFIG_PATH=/tmp/ferrax/lib/pkgconfig pkg-config --cflags --libs ferrax) -o lu
 *   ./lu /path/to/libscipy_openblas.so
 */
#include <ferrax.h>
#include <stdio.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s /path/to/libscipy_openblas.so\n", argv[0]);
    return 2;
  }
  char error[256];
  if (ferrax_lapack_load_library(argv[1], error, sizeof error) < 0) {
    fprintf(stderr, "LAPACK: %s\n", error);
    return 1;
  }
  double a[2][3][3] = {{{2, 1, 1}, {4, -6, 0}, {-2, 7, 2}}, {{1, 2, 3}, {4, 5, 6}, {7, 8, 10}}};
  int32_t ipiv[2][3], info[2];
  if (ferrax_dgetrf(FERRAX_ROW_MAJOR, 2, 3, 3, &a[0][0][0], 3, &ipiv[0][0], info) != 0) {
    fprintf(stderr, "ferrax_dgetrf: %s\n", ferrax_last_error());
    return 1;
  }
  for (int b = 0; b < 2; b++) {
    printf("matrix %d: info %d, pivots %d %d %d, U diagonal %g %g %g\n", b, info[b], ipiv[b][0],
           ipiv[b][1], ipiv[b][2], a[b][0][0], a[b][1][1], a[b][2][2]);
  }
  return 0;
}
