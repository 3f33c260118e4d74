/* Writes simulated CBED samples to HDF5. Every sample is one StarPU task writing its own pair of
 * handles (slots of a block buffer) and its record (struct cbed_meta, a slot beside them, read after
 * the handles are acquired, so after the task); two blocks alternate, so the host writes block b to
 * the file (acquiring its handles waits for exactly those tasks) while the workers simulate block
 * b + 1. Each worker keeps its own multislice work space, sized by each sample. The records go to
 * the compound dataset `meta` [n] (cbed_meta.c). Half precision is IEEE binary16 built with
 * H5Tset_fields (HDF5 1.10 has no predefined float16); readers convert it to float32 on read. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include "runtime/submit.h"
#include "sim/cbed/cbed_meta.h"
#include "runtime/hdf5_lock.h"
#include "runtime/error.h"

#define GEN_NAME "tessera-cbed multislice"
#define GEN_VERSION 3

struct shared {
  const tsr_cbed_opts *o;
  struct cbed_work *ws; /* one per worker */
  atomic_int failed;
  char error[512];
};

struct task_arg {
  struct shared *sh;
  int64_t index;
  struct cbed_meta *meta; /* read by the host after it acquired the task's handles */
};

static void sample_cpu(void *buffers[], void *cl_arg) {
  const struct task_arg *a = cl_arg;
  struct shared *sh = a->sh;
  int id = starpu_worker_get_id();
  tsr_status st = _tsr_cbed_sample_with(sh->o, &sh->ws[id < 0 ? 0 : id], a->index, TSR_BUF(buffers, 0),
                                        TSR_BUF(buffers, 1), a->meta);
  int expected = 0;
  if (st != TSR_OK && atomic_compare_exchange_strong(&sh->failed, &expected, 1))
    snprintf(sh->error, sizeof sh->error, "%s", tsr_last_error()); /* names the sample */
}

static struct starpu_perfmodel sample_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_cbed_sample"};
static struct starpu_codelet sample_cl = {.cpu_funcs = {sample_cpu}, .cpu_funcs_name = {"sample_cpu"},
                                          .nbuffers = STARPU_VARIABLE_NBUFFERS, .name = "tsr_cbed_sample",
                                          .model = &sample_model};

/* ---- HDF5 ---- */

static hid_t half_type(void) {
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  if (t < 0) return t;
  /* sign bit 15, exponent bits 10..14, mantissa bits 0..9, bias 15 */
  if (H5Tset_fields(t, 15, 10, 5, 0, 10) < 0 || H5Tset_precision(t, 16) < 0 || H5Tset_size(t, 2) < 0 ||
      H5Tset_ebias(t, 15) < 0) {
    H5Tclose(t);
    return -1;
  }
  return t;
}

static int write_attrs(hid_t f, const tsr_cbed_opts *o, int64_t first, int64_t n, int half) {
  char structs[128] = "", zones[32] = "";
  for (int s = 0; s < TSR_CBED_NSTRUCT; s++)
    if (o->structures >> s & 1)
      snprintf(structs + strlen(structs), sizeof structs - strlen(structs), "%s%s", *structs ? "," : "",
               tsr_cbed_structure_name((tsr_cbed_structure)s));
  char protos[256] = "";
  for (int k = 0; k < TSR_CBED_NPROTOTYPES; k++)
    if (o->prototypes >> k & 1)
      snprintf(protos + strlen(protos), sizeof protos - strlen(protos), "%s%s", *protos ? "," : "", _tsr_cbed_prototype_name(k));
  static const char *zn[] = {"001", "110", "111"};
  for (int z = 0; z < 3; z++)
    if (o->zones >> z & 1) snprintf(zones + strlen(zones), sizeof zones - strlen(zones), "%s%s", *zones ? "," : "", zn[z]);
  static const char *scal[] = {"linear", "sqrt", "log"};
  int version = GEN_VERSION, p = o->probes * o->probes;
  long long ff = first, nn = n;
  double lambda = tsr_cbed_wavelength(o->kv), sigma = tsr_cbed_sigma(o->kv);
  return _tsr_h5_attr_str(f, "generator", GEN_NAME) && _tsr_h5_attr(f, "generator_version", H5T_NATIVE_INT, &version) &&
         _tsr_h5_attr(f, "first_index", H5T_NATIVE_LLONG, &ff) && _tsr_h5_attr(f, "samples", H5T_NATIVE_LLONG, &nn) &&
         _tsr_h5_attr(f, "seed", H5T_NATIVE_UINT64, &o->seed) && _tsr_h5_attr(f, "kv", H5T_NATIVE_DOUBLE, &o->kv) &&
         _tsr_h5_attr(f, "wavelength_A", H5T_NATIVE_DOUBLE, &lambda) && _tsr_h5_attr(f, "sigma_rad_per_VA", H5T_NATIVE_DOUBLE, &sigma) &&
         _tsr_h5_attr(f, "alpha_mrad", H5T_NATIVE_DOUBLE, &o->alpha_mrad) && _tsr_h5_attr(f, "defocus_A", H5T_NATIVE_DOUBLE, &o->defocus) &&
         _tsr_h5_attr(f, "cs_mm", H5T_NATIVE_DOUBLE, &o->cs_mm) && _tsr_h5_attr(f, "grid", H5T_NATIVE_INT, &o->grid) &&
         _tsr_h5_attr(f, "pattern", H5T_NATIVE_INT, &o->pattern) && _tsr_h5_attr(f, "target", H5T_NATIVE_INT, &o->target) &&
         _tsr_h5_attr(f, "probes_per_side", H5T_NATIVE_INT, &o->probes) && _tsr_h5_attr(f, "probe_positions", H5T_NATIVE_INT, &p) &&
         _tsr_h5_attr(f, "fov_requested_A", H5T_NATIVE_DOUBLE, &o->fov) &&
         _tsr_h5_attr(f, "thickness_min_A", H5T_NATIVE_DOUBLE, &o->thickness_min) &&
         _tsr_h5_attr(f, "thickness_max_A", H5T_NATIVE_DOUBLE, &o->thickness_max) &&
         _tsr_h5_attr(f, "slice_A", H5T_NATIVE_DOUBLE, &o->slice) && _tsr_h5_attr(f, "blur_A", H5T_NATIVE_DOUBLE, &o->blur) &&
         _tsr_h5_attr_str(f, "structures", structs) && _tsr_h5_attr_str(f, "zones", zones) && _tsr_h5_attr(f, "shift", H5T_NATIVE_INT, &o->shift) &&
         _tsr_h5_attr(f, "random_atoms_min", H5T_NATIVE_INT, &o->random_atoms_min) &&
         _tsr_h5_attr(f, "random_atoms_max", H5T_NATIVE_INT, &o->random_atoms_max) &&
         _tsr_h5_attr_str(f, "intensity", scal[o->intensity]) &&
         _tsr_h5_attr(f, "intensity_floor", H5T_NATIVE_DOUBLE, &o->intensity_floor) &&
         _tsr_h5_attr_str(f, "cif", o->cif) && _tsr_h5_attr(f, "zone_index", H5T_NATIVE_INT, &o->zone_index) &&
         _tsr_h5_attr(f, "tilt_max_mrad", H5T_NATIVE_DOUBLE, &o->tilt_mrad) &&
         _tsr_h5_attr(f, "rotation_max_deg", H5T_NATIVE_DOUBLE, &o->rotation_deg) &&
         _tsr_h5_attr(f, "crystal_zmin", H5T_NATIVE_INT, &o->zmin) && _tsr_h5_attr(f, "crystal_zmax", H5T_NATIVE_INT, &o->zmax) &&
         _tsr_h5_attr(f, "crystal_sites", H5T_NATIVE_INT, &o->sites) &&
         _tsr_h5_attr(f, "crystal_min_distance_A", H5T_NATIVE_DOUBLE, &o->min_distance) &&
         _tsr_h5_attr(f, "crystal_density_min", H5T_NATIVE_DOUBLE, &o->density_min) &&
         _tsr_h5_attr(f, "crystal_density_max", H5T_NATIVE_DOUBLE, &o->density_max) &&
         _tsr_h5_attr_str(f, "prototypes", protos) && _tsr_h5_attr_str(f, "exclude_formulas", o->exclude) &&
         _tsr_h5_attr_str(f, "target_units", "V*A (projected potential of one period along the beam, not rescaled)") &&
         _tsr_h5_attr_str(f, "storage", half ? "float16" : "float32");
}

/* The physics options (the values drawn from their ranges are in `meta`); u2 has one entry per
 * atomic number 0..TSR_CBED_ZMAX, 0 = the built-in value. */
static int write_physics_attrs(hid_t f, const tsr_cbed_opts *o) {
  const struct {
    const char *name;
    const double *v;
  } d[] = {{"max_angle_mrad", &o->max_angle_mrad}, {"kv_spread", &o->kv_spread},
           {"alpha_spread_mrad", &o->alpha_spread}, {"defocus_spread_A", &o->defocus_spread},
           {"cs_spread_mm", &o->cs_spread},          {"a1_A", &o->a1},
           {"a1_spread_A", &o->a1_spread},           {"b2_A", &o->b2},
           {"b2_spread_A", &o->b2_spread},           {"source_rms_A", &o->source_A},
           {"detector_pixel_mrad", &o->det_mrad},    {"dose_electrons", &o->dose},
           {"detector_psf_pixels", &o->det_psf},     {"scan_A", &o->scan_A}};
  int ok = 1;
  for (size_t k = 0; ok && k < sizeof d / sizeof d[0]; k++) ok = _tsr_h5_attr(f, d[k].name, H5T_NATIVE_DOUBLE, d[k].v);
  hsize_t nz = TSR_CBED_ZMAX + 1;
  hid_t sp = ok ? H5Screate_simple(1, &nz, NULL) : -1;
  hid_t at = sp >= 0 ? H5Acreate2(f, "u2_A2", H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT) : -1;
  ok = at >= 0 && H5Awrite(at, H5T_NATIVE_DOUBLE, o->u2) >= 0;
  if (at >= 0) H5Aclose(at);
  if (sp >= 0) H5Sclose(sp);
  return ok && _tsr_h5_attr(f, "coherence_samples", H5T_NATIVE_INT, &o->coherence_samples) &&
         _tsr_h5_attr(f, "phonon_configurations", H5T_NATIVE_INT, &o->phonons);
}

static hid_t create_dset(hid_t f, const char *name, hid_t type, int64_t n, int c, int side) {
  hsize_t dims[4] = {(hsize_t)n, (hsize_t)c, (hsize_t)side, (hsize_t)side}, chunk[4] = {1, dims[1], dims[2], dims[3]};
  hid_t sp = H5Screate_simple(4, dims, NULL), pl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(pl, 4, chunk);
  hid_t d = H5Dcreate2(f, name, type, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
  H5Pclose(pl);
  H5Sclose(sp);
  return d;
}

static int write_rows(hid_t d, int64_t first, int64_t count, int c, int side, const float *buf) {
  hsize_t start[4] = {(hsize_t)first, 0, 0, 0}, cnt[4] = {(hsize_t)count, (hsize_t)c, (hsize_t)side, (hsize_t)side};
  hid_t fs = H5Dget_space(d), ms = H5Screate_simple(4, cnt, NULL);
  int ok = fs >= 0 && ms >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL) >= 0 &&
           H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf) >= 0;
  if (ms >= 0) H5Sclose(ms);
  if (fs >= 0) H5Sclose(fs);
  return ok;
}

/* ---- the pipeline ---- */

struct blocks {
  int cap;                       /* samples per block */
  size_t xe, ve;
  float *x[2], *v[2];
  starpu_data_handle_t *hx[2], *hv[2];
  struct cbed_meta *meta[2];
};

static void blocks_free(struct blocks *b) {
  for (int k = 0; k < 2; k++) {
    for (int i = 0; b->hx[k] && i < b->cap; i++)
      if (b->hx[k][i]) starpu_data_unregister(b->hx[k][i]);
    for (int i = 0; b->hv[k] && i < b->cap; i++)
      if (b->hv[k][i]) starpu_data_unregister(b->hv[k][i]);
    free(b->hx[k]), free(b->hv[k]), free(b->x[k]), free(b->v[k]), free(b->meta[k]);
  }
}

static int blocks_init(struct blocks *b, int cap, size_t xe, size_t ve) {
  *b = (struct blocks){.cap = cap, .xe = xe, .ve = ve};
  for (int k = 0; k < 2; k++) {
    b->x[k] = malloc(sizeof(float) * xe * cap), b->v[k] = malloc(sizeof(float) * ve * cap);
    b->hx[k] = calloc(cap, sizeof(starpu_data_handle_t)), b->hv[k] = calloc(cap, sizeof(starpu_data_handle_t));
    b->meta[k] = calloc(cap, sizeof(struct cbed_meta));
    if (!b->x[k] || !b->v[k] || !b->hx[k] || !b->hv[k] || !b->meta[k]) return -1;
    for (int i = 0; i < cap; i++) {
      b->hx[k][i] = _tsr_register_floats(b->x[k] + xe * i, xe);
      b->hv[k][i] = _tsr_register_floats(b->v[k] + ve * i, ve);
    }
  }
  return 0;
}

static tsr_status submit_block(struct blocks *b, int k, struct shared *sh, int64_t first, int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    struct task_arg a = {sh, first + i, &b->meta[k][i]};
    struct _tsr_buf bufs[2] = {{b->hx[k][i], STARPU_W}, {b->hv[k][i], STARPU_W}};
    if (_tsr_submit(&sample_cl, &a, sizeof a, STARPU_DEFAULT_PRIO, "cbed_sample", 2, bufs) != 0) return TSR_ERR_RUNTIME;
  }
  return TSR_OK;
}

static tsr_status run(const tsr_cbed_opts *o, int64_t first, int64_t n, const char *tmp, hid_t din, hid_t dtg,
                      hid_t dmeta, void (*progress)(void *, int64_t, int64_t), void *user) {
  int nw = (int)starpu_worker_get_count();
  struct shared sh = {.o = o, .ws = calloc(nw > 0 ? nw : 1, sizeof(struct cbed_work))};
  struct blocks b;
  int cap = 4 * (nw > 0 ? nw : 1);
  size_t xe = (size_t)o->probes * o->probes * o->pattern * o->pattern, ve = (size_t)o->target * o->target;
  tsr_status st = sh.ws && blocks_init(&b, cap, xe, ve) == 0 ? TSR_OK : _tsr_error(TSR_ERR_NOMEM, "cbed: out of memory");
  int64_t nblocks = (n + cap - 1) / cap;
  if (st == TSR_OK) st = submit_block(&b, 0, &sh, first, n < cap ? n : cap);
  char why[256];
  if (progress && st == TSR_OK) progress(user, 0, n);
  for (int64_t k = 0; k < nblocks && st == TSR_OK; k++) {
    int64_t off = k * cap, cnt = n - off < cap ? n - off : cap;
    if (k + 1 < nblocks) {
      int64_t noff = off + cap, ncnt = n - noff < cap ? n - noff : cap;
      st = submit_block(&b, (k + 1) & 1, &sh, first + noff, ncnt);
    }
    int p = k & 1;
    for (int64_t i = 0; i < cnt; i++) {
      starpu_data_acquire(b.hx[p][i], STARPU_R);
      starpu_data_acquire(b.hv[p][i], STARPU_R);
    }
    if (st == TSR_OK && atomic_load(&sh.failed)) st = _tsr_error(TSR_ERR_RUNTIME, "%s", sh.error);
    if (st == TSR_OK) {
      _tsr_hdf5_lock();
      if (!write_rows(din, off, cnt, o->probes * o->probes, o->pattern, b.x[p]) ||
          !write_rows(dtg, off, cnt, 1, o->target, b.v[p]) || !_tsr_cbed_meta_write(dmeta, off, cnt, b.meta[p]))
        st = _tsr_error(TSR_ERR_IO, "%s: cannot write samples %lld..%lld (%s)", tmp, (long long)off,
                        (long long)(off + cnt - 1), _tsr_hdf5_reason(why));
      _tsr_hdf5_unlock();
    }
    for (int64_t i = 0; i < cnt; i++) {
      starpu_data_release(b.hx[p][i]);
      starpu_data_release(b.hv[p][i]);
    }
    if (progress && st == TSR_OK) progress(user, off + cnt, n);
  }
  starpu_task_wait_for_all();
  if (sh.ws) blocks_free(&b);
  for (int i = 0; sh.ws && i < nw; i++) _tsr_cbed_work_free(&sh.ws[i]);
  free(sh.ws);
  return st;
}

tsr_status tsr_cbed_write(tsr_context *ctx, const tsr_cbed_opts *o, int64_t first, int64_t n, int half,
                          const char *path, void (*progress)(void *user, int64_t done, int64_t total), void *user) {
  TSR_TRY(tsr_cbed_opts_check(o));
  if (!ctx || !path) return _tsr_error(TSR_ERR_ARG, "tsr_cbed_write: %s is NULL", ctx ? "path" : "ctx");
  if (n < 1 || first < 0) return _tsr_error(TSR_ERR_ARG, "tsr_cbed_write: samples %lld from %lld", (long long)n, (long long)first);
  size_t len = strlen(path);
  char *tmp = malloc(len + 5), why[256];
  if (!tmp) return _tsr_error(TSR_ERR_NOMEM, "cbed: out of memory");
  snprintf(tmp, len + 5, "%s.tmp", path);
  tsr_status st = TSR_OK;
  _tsr_hdf5_lock();
  hid_t type = half ? half_type() : H5Tcopy(H5T_IEEE_F32LE);
  hid_t f = type < 0 ? -1 : H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), din = -1, dtg = -1,
        dmeta = -1;
  if (f < 0) st = _tsr_error(TSR_ERR_IO, "%s: cannot create (%s)", tmp, _tsr_hdf5_reason(why));
  if (st == TSR_OK) {
    din = create_dset(f, "cbed", type, n, o->probes * o->probes, o->pattern);
    dtg = create_dset(f, "potential", type, n, 1, o->target);
    dmeta = _tsr_cbed_meta_create(f, n);
    if (din < 0 || dtg < 0 || dmeta < 0 || !write_attrs(f, o, first, n, half) || !write_physics_attrs(f, o))
      st = _tsr_error(TSR_ERR_IO, "%s: cannot create datasets (%s)", tmp, _tsr_hdf5_reason(why));
  }
  _tsr_hdf5_unlock();
  if (st == TSR_OK) st = run(o, first, n, tmp, din, dtg, dmeta, progress, user);
  _tsr_hdf5_lock();
  if (din >= 0) H5Dclose(din);
  if (dtg >= 0) H5Dclose(dtg);
  if (dmeta >= 0) H5Dclose(dmeta);
  if (type >= 0) H5Tclose(type);
  if (f >= 0 && H5Fclose(f) < 0 && st == TSR_OK) st = _tsr_error(TSR_ERR_IO, "%s: cannot close (%s)", tmp, _tsr_hdf5_reason(why));
  _tsr_hdf5_unlock();
  if (st == TSR_OK && rename(tmp, path) != 0)
    st = _tsr_error(TSR_ERR_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
  if (st != TSR_OK) remove(tmp);
  free(tmp);
  return st;
}
