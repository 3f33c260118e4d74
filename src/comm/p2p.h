/* Point-to-point messages of the collectives: detached StarPU-MPI sends and receives addressed by a
 * member's index in a communicator (traced when tracing is on), and the tag of one message of one
 * reduction. */
#ifndef TSR_COMM_P2P_H
#define TSR_COMM_P2P_H

#include <stdint.h>
#include <starpu.h>

struct _tsr_comm;

/* Detached send/receive of handle h to/from member `peer` of cm, at the highest priority; 0 or
 * StarPU-MPI's error. `step` labels the trace's transfer events. */
int _tsr_p2p_send(const struct _tsr_comm *cm, starpu_data_handle_t h, int peer, int64_t tag, int64_t step);
int _tsr_p2p_recv(const struct _tsr_comm *cm, starpu_data_handle_t h, int peer, int64_t tag, int64_t step);
/* Unique per (communicator, step, group g < 4096, message k < 2048) among messages in flight. */
int64_t _tsr_p2p_tag(const struct _tsr_comm *cm, int64_t step, int g, int k);
/* Unique per (communicator, step, layer < 1024, slice < 64, message kind k < 64) among messages in
 * flight: the halo exchanges, gathers and statistics sums of spatially split layers. */
int64_t _tsr_p2p_layer_tag(const struct _tsr_comm *cm, int64_t step, int layer, int slice, int k);

#endif
