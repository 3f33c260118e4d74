/* Scalar and string attributes of checkpoint files, written with the file's little-endian types
 * and read back with checks of their form (a fuzzed file must not make HDF5 read past a buffer). */
#include <string.h>

#include "io/checkpoint_h5.h"
#include "runtime/error.h"

herr_t _tsr_ck_attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *v) {
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = sp < 0 ? -1 : H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
  herr_t e = a < 0 ? -1 : H5Awrite(a, mtype, v);
  if (a >= 0 && H5Aclose(a) < 0) e = -1;
  if (sp >= 0) H5Sclose(sp);
  return a < 0 ? -1 : e;
}

herr_t _tsr_ck_attr_write_str(hid_t obj, const char *name, const char *v) {
  hid_t str = H5Tcopy(H5T_C_S1);
  herr_t e = str < 0 || H5Tset_size(str, strlen(v) + 1) < 0 ? -1 : _tsr_ck_attr_write(obj, name, str, str, v);
  if (str >= 0) H5Tclose(str);
  return e;
}

tsr_status _tsr_ck_attr_read(hid_t f, const char *file, const char *name, hid_t mtype, void *v) {
  if (H5Aexists(f, name) <= 0) return _tsr_error(TSR_ERR_FORMAT, "%s: not a checkpoint: attribute '%s' is missing", file, name);
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  hid_t sp = a < 0 ? -1 : H5Aget_space(a);
  int ok = sp >= 0 && H5Sget_simple_extent_type(sp) == H5S_SCALAR && H5Aread(a, mtype, v) >= 0;
  if (sp >= 0) H5Sclose(sp);
  if (a >= 0) H5Aclose(a);
  return ok ? TSR_OK : _tsr_error(TSR_ERR_FORMAT, "%s: attribute '%s' is not a readable scalar", file, name);
}

tsr_status _tsr_ck_attr_read_str(hid_t obj, const char *file, const char *name, char *buf, size_t cap) {
  if (H5Aexists(obj, name) <= 0) return _tsr_error(TSR_ERR_FORMAT, "%s: attribute '%s' is missing", file, name);
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  hid_t ft = a < 0 ? -1 : H5Aget_type(a), sp = a < 0 ? -1 : H5Aget_space(a), mt = H5Tcopy(H5T_C_S1);
  size_t size = ft < 0 ? 0 : H5Tget_size(ft);
  int ok = ft >= 0 && sp >= 0 && mt >= 0 && H5Sget_simple_extent_type(sp) == H5S_SCALAR &&
           H5Tget_class(ft) == H5T_STRING && H5Tis_variable_str(ft) == 0 && size > 0 && size < cap &&
           H5Tset_size(mt, size) >= 0 && H5Aread(a, mt, buf) >= 0;
  if (ok) buf[size] = '\0';
  if (mt >= 0) H5Tclose(mt);
  if (sp >= 0) H5Sclose(sp);
  if (ft >= 0) H5Tclose(ft);
  if (a >= 0) H5Aclose(a);
  return ok ? TSR_OK
            : _tsr_error(TSR_ERR_FORMAT, "%s: attribute '%s' is not a string of at most %zu bytes", file, name,
                         cap - 1);
}
