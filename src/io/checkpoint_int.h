/* Internal checkpoint representation shared by the file format (checkpoint.c), the folders
 * (checkpoint_dir.c), the trainer's side (src/train/checkpoint.c) and the fuzz target: every
 * tensor's values and optimizer state held in memory. */
#ifndef TSR_IO_CHECKPOINT_INT_H
#define TSR_IO_CHECKPOINT_INT_H

#include <tessera/checkpoint.h>
#include <tessera/tensor.h>

#define TSR_CK_NAME_MAX 128
/* Optimizer state tensors per trainable tensor, and the length of their names. */
#define TSR_CK_MAX_STATE 4
#define TSR_CK_STATE_NAME 32
/* The format version written; version 1 (no optimizer record, loss-scaling options or input
 * normalisation) is read too. */
#define TSR_CK_VERSION 2

struct _tsr_ck_tensor {
  char name[TSR_CK_NAME_MAX];
  tsr_shape shape;
  int trainable;
  float *w, *state[TSR_CK_MAX_STATE]; /* state[] only for trainable tensors */
};

struct _tsr_ck {
  tsr_checkpoint_meta meta;
  int version; /* of the file read (1 or 2); files are written as version 2 */
  uint64_t checksum;
  int n;
  struct _tsr_ck_tensor *t;
  /* The optimizer's state tensors, each a group of that name (as its registry entry names them),
   * listed by the attribute state_tensors of /optimizer; files without the list (version 1, and
   * version 2 before it) hold "moment0" and "moment1". */
  int nstate;
  char state[TSR_CK_MAX_STATE][TSR_CK_STATE_NAME];
  int norm_c; /* input normalisation: [norm_c] each (mean 0, std 1: none); version 2 only */
  float *norm_mean, *norm_std;
  int tnorm_c; /* target standardisation: [tnorm_c] each; 0: none (the file has no /target_norm) */
  float *tnorm_mean, *tnorm_std;
};

uint64_t _tsr_ck_checksum(const struct _tsr_ck *ck);
/* Writes through path.tmp + fsync + rename; ck->checksum must be set. */
tsr_status _tsr_ck_write(const struct _tsr_ck *ck, const char *path);
/* checkpoint_digest.c. Writes path.sum, the digest of the bytes now in path (what _tsr_ck_write
 * does before its rename); for tests and the fuzz target, which make checkpoints whose digest matches. */
tsr_status _tsr_ck_write_sum(const char *path);
/* Writes path.sum for the bytes now in `file` (a temporary renamed to path later). */
tsr_status _tsr_ck_write_sum_of(const char *path, const char *file);
/* Compares path's bytes with path.sum; a checkpoint without one is refused. */
tsr_status _tsr_ck_check_sum(const char *path);
/* The hash of checksums and digests (FNV-1a over 64-bit words), and fsync of a file or folder. */
uint64_t _tsr_ck_hash(uint64_t h, const void *p, size_t n);
tsr_status _tsr_ck_fsync(const char *path, int dir);
/* Reads and verifies everything (checksum included); on failure ck is empty. */
tsr_status _tsr_ck_read(struct _tsr_ck *ck, const char *path);
void _tsr_ck_free(struct _tsr_ck *ck);

/* checkpoint_dir.c: folders of checkpoints, dir/ckpt-<step, 12 digits>.h5. */
void _tsr_ck_dir_path(char *out, size_t cap, const char *dir, int64_t step);
/* Creates the folder and its parents if absent. */
tsr_status _tsr_ck_dir_make(const char *dir);
/* Removes all but the newest `keep` checkpoints of dir (keep <= 0: none) and their digests. */
tsr_status _tsr_ck_dir_prune(const char *dir, int keep);

#endif
