/* Start-up agreement between ranks: every rank hashes what must be identical (model, group
 * layout, optimizer, initial parameters, sample shapes) and a mismatch stops every rank with an
 * error naming the first entry that differs, instead of a hang in mismatched collectives. */
#ifndef TSR_COMM_FINGERPRINT_H
#define TSR_COMM_FINGERPRINT_H

#include <stdint.h>
#include <tessera/status.h>

struct tsr_trainer;

uint64_t _tsr_hash(uint64_t h, const void *data, size_t len);
#define TSR_HASH_INIT 1469598103934665603ull

/* Collective over all ranks: compares n entries (hashes) with rank 0's; label(i) describes entry i
 * on this rank. Returns TSR_ERR_MISMATCH on every rank when any entry differs anywhere. */
tsr_status _tsr_agree(int rank, int size, int n, const uint64_t *hashes, const char *(*label)(void *, int, char *, size_t),
                      void *user);
tsr_status _tsr_fingerprint_check(struct tsr_trainer *t);

#endif
