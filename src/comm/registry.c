/* The collectives by name. Entries sharing a name are alternatives in order of preference (NCCL
 * where it can run, the StarPU-MPI ring everywhere); the names, in order of first appearance, are
 * the values of tsr_reduce_precision. A new reduction is one line here plus its own file. */
#include <stdio.h>
#include <string.h>

#include "comm/collective.h"

extern const struct _tsr_collective_ops _tsr_nccl_f32, _tsr_nccl_bf16, _tsr_nccl_fp16;
extern const struct _tsr_collective_ops _tsr_ring_f32, _tsr_ring_bf16, _tsr_ring_fp16;
extern const struct _tsr_collective_ops _tsr_rd_f32, _tsr_rd_bf16, _tsr_rd_fp16;
extern const struct _tsr_collective_ops _tsr_tree_f32, _tsr_tree_bf16, _tsr_tree_fp16;
extern const struct _tsr_collective_ops _tsr_hier_f32, _tsr_hier_bf16, _tsr_hier_fp16;
extern const struct _tsr_collective_ops _tsr_rabenseifner_f32, _tsr_rabenseifner_bf16, _tsr_rabenseifner_fp16;
extern const struct _tsr_collective_ops _tsr_hier_rh_f32, _tsr_hier_rh_bf16, _tsr_hier_rh_fp16;
extern const struct _tsr_collective_ops _tsr_sign_1bit, _tsr_sign_pbit, _tsr_sign_pbit_mean;

static const struct _tsr_collective_ops *const entries[] = {
    &_tsr_nccl_f32,  &_tsr_ring_f32,
    &_tsr_nccl_bf16, &_tsr_ring_bf16,
    &_tsr_nccl_fp16, &_tsr_ring_fp16,
    &_tsr_rd_f32,    &_tsr_rd_bf16,   &_tsr_rd_fp16,
    &_tsr_tree_f32,  &_tsr_tree_bf16, &_tsr_tree_fp16,
    &_tsr_hier_f32,  &_tsr_hier_bf16, &_tsr_hier_fp16,
    &_tsr_rabenseifner_f32, &_tsr_rabenseifner_bf16, &_tsr_rabenseifner_fp16,
    &_tsr_hier_rh_f32, &_tsr_hier_rh_bf16, &_tsr_hier_rh_fp16,
    &_tsr_sign_1bit, &_tsr_sign_pbit, &_tsr_sign_pbit_mean,
};
#define NENTRIES ((int)(sizeof entries / sizeof entries[0]))

/* Index among distinct names of entry e's name, or -1 if an earlier entry has it. */
static int first_of_name(int e) {
  int index = 0;
  for (int i = 0; i < e; i++) {
    if (strcmp(entries[i]->name, entries[e]->name) == 0) return -1;
    index += first_of_name(i) >= 0;
  }
  return index;
}

int _tsr_collective_count(void) {
  int n = 0;
  for (int e = 0; e < NENTRIES; e++) n += first_of_name(e) >= 0;
  return n;
}

const char *_tsr_collective_name(int index) {
  for (int e = 0; e < NENTRIES; e++)
    if (first_of_name(e) == index && index >= 0) return entries[e]->name;
  return NULL;
}

int _tsr_collective_index(const char *name) {
  for (int e = 0; name && e < NENTRIES; e++)
    if (strcmp(entries[e]->name, name) == 0) return first_of_name(e); /* the first entry of that name */
  return -1;
}

const char *_tsr_collective_names(char *buf, size_t len) {
  int n = _tsr_collective_count();
  size_t at = 0;
  buf[0] = 0;
  for (int i = 0; i < n && at < len; i++)
    at += (size_t)snprintf(buf + at, len - at, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ",
                           _tsr_collective_name(i));
  return buf;
}

int _tsr_collective_usable(const char *name, const char *impl, const struct _tsr_comm *comm, const char *skip_impl,
                           const struct _tsr_collective_ops **out, int max) {
  int n = 0;
  for (int e = 0; name && e < NENTRIES; e++) {
    const struct _tsr_collective_ops *o = entries[e];
    if (strcmp(o->name, name) == 0 && (!impl || strcmp(o->impl, impl) == 0) &&
        !(skip_impl && strcmp(o->impl, skip_impl) == 0) && (!o->usable || o->usable(comm))) {
      if (n < max) out[n] = o;
      n++;
    }
  }
  return n;
}

/* Index of the first entry with entry e's implementation. */
static int first_of_impl(int e) {
  for (int i = 0; i < e; i++)
    if (strcmp(entries[i]->impl, entries[e]->impl) == 0) return i;
  return e;
}

int _tsr_collective_algo_known(const char *algo) {
  if (algo && strcmp(algo, "auto") == 0) return 1;
  for (int e = 0; algo && e < NENTRIES; e++)
    if (strcmp(entries[e]->impl, algo) == 0) return 1;
  return 0;
}

const char *_tsr_collective_algos(char *buf, size_t len) {
  size_t at = 0;
  buf[0] = 0;
  for (int e = 0; e < NENTRIES && at < len; e++)
    if (first_of_impl(e) == e) at += (size_t)snprintf(buf + at, len - at, "%s, ", entries[e]->impl);
  if (at < len) snprintf(buf + at, len - at, "or auto");
  return buf;
}

const struct _tsr_collective_ops *_tsr_collective_select(const char *name, const struct _tsr_comm *comm,
                                                         const char *skip_impl) {
  const struct _tsr_collective_ops *o = NULL;
  return _tsr_collective_usable(name, NULL, comm, skip_impl, &o, 1) ? o : NULL;
}
