/* The one random-number generator of the library: SplitMix64 (Steele, Lea and Flood 2014) read as
 * a counter-based stream. Draw k of the stream with key K is mix64(K + k * gamma), so any draw is
 * computed without the ones before it: a dropout mask bit per element, a simulated sample per
 * index, a shuffle per epoch, whatever the number of workers and ranks. Header-only (static inline)
 * so that vectorised loops inline it; CUDA code gets the same functions on the device. */
#ifndef TSR_RUNTIME_RNG_H
#define TSR_RUNTIME_RNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define TSR_RNG_FN __host__ __device__ static inline
#else
#define TSR_RNG_FN static inline
#endif

/* SplitMix64's increment: 2^64 divided by the golden ratio, odd. */
#define TSR_RNG_GAMMA 0x9E3779B97F4A7C15ull

/* SplitMix64's finaliser: a bijective mix whose output bits all depend on every input bit. */
TSR_RNG_FN uint64_t _tsr_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Draw k of the stream with key `key` (the first draw of a stream is k = 1). */
TSR_RNG_FN uint64_t _tsr_rng_at(uint64_t key, uint64_t k) { return _tsr_mix64(key + k * TSR_RNG_GAMMA); }

/* SplitMix64's output from state x (draw 1 of key x): a hash of x, chained as
 * _tsr_splitmix64(_tsr_splitmix64(a) + b) to combine several integers into one seed. */
TSR_RNG_FN uint64_t _tsr_splitmix64(uint64_t x) { return _tsr_rng_at(x, 1); }

/* A stream read in order: draws ctr + 1, ctr + 2, ... */
struct _tsr_rng {
  uint64_t key, ctr;
};

/* The stream of (seed, salt + index): streams of nearby seeds or indices are unrelated. Each user
 * has its own salt, so the simulators' and the loader's streams differ for one seed. */
TSR_RNG_FN struct _tsr_rng _tsr_rng_stream(uint64_t seed, uint64_t salted_index) {
  struct _tsr_rng r = {_tsr_mix64(seed ^ _tsr_mix64(salted_index)), 0};
  return r;
}

TSR_RNG_FN uint64_t _tsr_rng_next(struct _tsr_rng *r) { return _tsr_rng_at(r->key, ++r->ctr); }

/* Uniform in [0, 1): the draw's top 53 bits. */
TSR_RNG_FN double _tsr_rng_uniform(struct _tsr_rng *r) {
  return (double)(_tsr_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

#endif
