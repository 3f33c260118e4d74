/* The per-sample record in HDF5: dataset `meta` [N] of one compound type whose members are the
 * fields of struct cbed_meta under the same names, lengths in A and angles as their names say
 * (h5py reads it as a structured array: f["meta"]["supercell"][i]). Callers hold the HDF5 lock. */
#include <stddef.h>

#include <hdf5.h>

#include "sim/cbed/cbed_meta.h"

static int add_array(hid_t t, const char *name, size_t off, hid_t base, hsize_t n) {
  hid_t a = H5Tarray_create2(base, 1, &n);
  int ok = a >= 0 && H5Tinsert(t, name, off, a) >= 0;
  if (a >= 0) H5Tclose(a);
  return ok;
}

static int add_string(hid_t t, const char *name, size_t off, size_t len) {
  hid_t s = H5Tcopy(H5T_C_S1);
  int ok = s >= 0 && H5Tset_size(s, len) >= 0 && H5Tset_strpad(s, H5T_STR_NULLTERM) >= 0 && H5Tinsert(t, name, off, s) >= 0;
  if (s >= 0) H5Tclose(s);
  return ok;
}

#define STR(f) add_string(t, #f, offsetof(struct cbed_meta, f), sizeof(((struct cbed_meta *)0)->f))
#define ARR(f, type, n) add_array(t, #f, offsetof(struct cbed_meta, f), type, n)
#define ONE(f, type) (H5Tinsert(t, #f, offsetof(struct cbed_meta, f), type) >= 0)

/* The compound type in memory (native layout; HDF5 stores it packed as written). */
static hid_t meta_type(void) {
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct cbed_meta)), d = H5T_NATIVE_DOUBLE, i = H5T_NATIVE_INT;
  if (t < 0) return t;
  int ok = STR(structure) && STR(formula) && STR(source) && ONE(spacegroup, i) && ARR(cell, d, 6) && ARR(zone, i, 3) &&
           ARR(edge_x, i, 3) && ARR(edge_y, i, 3) && ARR(tiles, i, 2) && ARR(supercell, d, 3) && ONE(strain, d) &&
           ONE(rotation_deg, d) && ARR(tilt_mrad, d, 2) && ARR(origin_A, d, 2) && ONE(thickness_A, d) &&
           ONE(periods, i) && ONE(atoms, i) && ONE(crystal_redraws, i) && ONE(kv, d) && ONE(alpha_mrad, d) && ONE(defocus_A, d) && ONE(cs_mm, d) &&
           ONE(a1_A, d) && ONE(a1_angle_deg, d) && ONE(b2_A, d) && ONE(b2_angle_deg, d) && ONE(source_rms_A, d) &&
           ONE(dose_electrons, d) && ONE(grid, i) && ONE(slices_per_period, i) && ONE(slice_A, d) &&
           ONE(band_limit_mrad, d) && ARR(sim_pixel_mrad, d, 2) && ONE(detector_pixel_mrad, d) &&
           ONE(phonon_configurations, i) && ONE(coherence_samples, i) && ONE(blur_A, d) && ARR(pixel_A, d, 2) &&
           ONE(target_mean_VA, d) && ONE(target_std_VA, d) && ARR(scan_A, d, 4);
  if (!ok) {
    H5Tclose(t);
    return -1;
  }
  return t;
}

hid_t _tsr_cbed_meta_create(hid_t f, int64_t n) {
  hid_t t = meta_type();
  if (t < 0) return -1;
  hsize_t dims = (hsize_t)n;
  hid_t sp = H5Screate_simple(1, &dims, NULL);
  hid_t d = sp < 0 ? -1 : H5Dcreate2(f, "meta", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (sp >= 0) H5Sclose(sp);
  H5Tclose(t);
  return d;
}

int _tsr_cbed_meta_write(hid_t d, int64_t first, int64_t count, const struct cbed_meta *m) {
  hsize_t start = (hsize_t)first, cnt = (hsize_t)count;
  hid_t t = meta_type(), fs = H5Dget_space(d), ms = H5Screate_simple(1, &cnt, NULL);
  int ok = t >= 0 && fs >= 0 && ms >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &cnt, NULL) >= 0 &&
           H5Dwrite(d, t, ms, fs, H5P_DEFAULT, m) >= 0;
  if (ms >= 0) H5Sclose(ms);
  if (fs >= 0) H5Sclose(fs);
  if (t >= 0) H5Tclose(t);
  return ok;
}
