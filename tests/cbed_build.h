/* Test helper shared by check_cbed and check_cbed_physics: a built-in crystal along a zone given by
 * its tessera-cbed bit (1 = [001], 2 = [110], 4 = [111]) as one period of an orthogonal supercell,
 * the way the library's specimens are built (cbed_specimen.c). */
#ifndef TSR_TESTS_CBED_BUILD_H
#define TSR_TESTS_CBED_BUILD_H

#include <math.h>

#include <check.h>

#include "sim/cbed/cbed.h"

static inline int build_crystal(struct cbed_atoms *a, tsr_cbed_structure s, int zone, double fov, double sx, double sy) {
  static const int uvw[5][3] = {[1] = {0, 0, 1}, [2] = {1, 1, 0}, [4] = {1, 1, 1}};
  struct cbed_crystal c;
  ck_assert_int_eq(_tsr_cbed_crystal_builtin(s, &c), 0);
  struct cbed_zone z;
  int rc = _tsr_cbed_zone_cell(&c, uvw[zone], 0, fmax(fov, 4 * c.cell[0]), &z);
  if (rc == 0) rc = _tsr_cbed_build_supercell(a, &c, &z, fov, sx, sy);
  _tsr_cbed_crystal_free(&c);
  return rc;
}

#endif
