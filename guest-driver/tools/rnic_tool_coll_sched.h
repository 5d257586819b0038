/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The schedules of rnic-coll, as pure functions (no device, no libc beyond stdint): which
 * chunk a rank sends and receives at each step of the ring, where each chunk and slice
 * lies in the buffer when the element count does not divide by the number of ranks, the
 * immediate value that names a chunk, the MoE routing table, and the reference values
 * results are checked against. tests/host_coll_sched.rs compiles this header into a small
 * host program with the system cc and checks it (every chunk reduced exactly once by every
 * rank, every rank ends with every chunk, offsets cover the buffer without overlap).
 *
 * Ring (reduce-scatter, then all-gather), N ranks, steps s = 0 .. N-2 in each phase:
 *   reduce-scatter step s: rank r sends chunk (r - s - 1) mod N to rank r + 1 and receives
 *       chunk (r - s - 2) mod N from rank r - 1, which it reduces into its own copy; after
 *       the last step rank r holds the full sum of chunk r (the layout of NCCL's
 *       ReduceScatter output; it is the schedule send_rank = (rank - step) mod N shifted
 *       by one so that the owned chunk is the rank's own);
 *   all-gather step s: rank r sends chunk (r - s) mod N and receives chunk (r - s - 1) mod N.
 * Chunk c holds elements [c * q + min(c, m), + q + (c < m)) of count = q * N + m.
 * Not modelled: trees, several rings, or NVLink-style intra-node steps.
 */
#ifndef RNIC_TOOL_COLL_SCHED_H
#define RNIC_TOOL_COLL_SCHED_H

#include <stdint.h>

/* (a mod n) for a possibly negative a. */
static inline uint32_t cs_mod(int64_t a, uint32_t n)
{
	int64_t m = a % (int64_t)n;

	return (uint32_t)(m < 0 ? m + n : m);
}

/* Elements of chunk c when count elements are split over n ranks. */
static inline uint64_t cs_chunk_len(uint64_t count, uint32_t n, uint32_t c)
{
	return count / n + (c < count % n ? 1 : 0);
}

/* First element of chunk c. */
static inline uint64_t cs_chunk_off(uint64_t count, uint32_t n, uint32_t c)
{
	uint64_t m = count % n;

	return (uint64_t)c * (count / n) + (c < m ? c : m);
}

/* Reduce-scatter step s (0..n-2): the chunk rank r sends, and the chunk it receives. */
static inline uint32_t cs_rs_send_chunk(uint32_t r, uint32_t s, uint32_t n)
{
	return cs_mod((int64_t)r - s - 1, n);
}

static inline uint32_t cs_rs_recv_chunk(uint32_t r, uint32_t s, uint32_t n)
{
	return cs_mod((int64_t)r - s - 2, n);
}

/* All-gather step s (0..n-2). */
static inline uint32_t cs_ag_send_chunk(uint32_t r, uint32_t s, uint32_t n)
{
	return cs_mod((int64_t)r - s, n);
}

static inline uint32_t cs_ag_recv_chunk(uint32_t r, uint32_t s, uint32_t n)
{
	return cs_mod((int64_t)r - s - 1, n);
}

/* Slices of a chunk of len elements, slice elements each (the last may be shorter). */
static inline uint32_t cs_nslices(uint64_t len, uint64_t slice)
{
	return (uint32_t)((len + slice - 1) / slice);
}

static inline uint64_t cs_slice_len(uint64_t len, uint64_t slice, uint32_t j)
{
	uint64_t off = (uint64_t)j * slice;

	return off >= len ? 0 : (len - off < slice ? len - off : slice);
}

/*
 * Immediate data of a ring WRITE_WITH_IMM: which iteration (4 bits, to tell an early
 * arrival of the next iteration), which global step (8 bits: reduce-scatter steps 0..n-2,
 * all-gather steps n-1..2n-3), which chunk (8 bits) and which slice (12 bits).
 */
#define CS_MAX_RANKS	64
#define CS_MAX_SLICES	4096

static inline uint32_t cs_imm(uint32_t iter, uint32_t step, uint32_t chunk, uint32_t slice)
{
	return (iter & 0xf) << 28 | (step & 0xff) << 20 | (chunk & 0xff) << 12 | (slice & 0xfff);
}

static inline uint32_t cs_imm_iter(uint32_t imm) { return imm >> 28; }
static inline uint32_t cs_imm_step(uint32_t imm) { return (imm >> 20) & 0xff; }
static inline uint32_t cs_imm_chunk(uint32_t imm) { return (imm >> 12) & 0xff; }
static inline uint32_t cs_imm_slice(uint32_t imm) { return imm & 0xfff; }

/* A 32-bit mix (murmur3's finalizer) for seeded values. */
static inline uint32_t cs_mix(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x85ebca6bu;
	x ^= x >> 13;
	x *= 0xc2b2ae35u;
	x ^= x >> 16;
	return x;
}

/*
 * Input element i of rank r for seed: an integer in -512..511, so that sums over up to
 * 2^14 ranks are exact in f32 whatever the order of additions: the reference does not
 * depend on the order the ring reduced in, and a missing or doubled contribution shows.
 */
static inline float cs_input(uint32_t seed, uint32_t r, uint64_t i)
{
	uint32_t h = cs_mix((uint32_t)i * 0x9e3779b1u ^ cs_mix(seed * 0x27d4eb2fu + r + 1) ^
			    (uint32_t)(i >> 32));

	return (float)((int32_t)(h & 1023) - 512);
}

/* The all_reduce reference: the sum over ranks of element i, computed in int. */
static inline float cs_sum_ref(uint32_t seed, uint32_t n, uint64_t i)
{
	int64_t s = 0;
	uint32_t r;

	for (r = 0; r < n; r++)
		s += (int64_t)cs_input(seed, r, i);
	return (float)s;
}

/* MoE: the expert token t of rank r goes to (seeded), and the rank that hosts expert e. */
static inline uint32_t cs_moe_expert(uint32_t seed, uint32_t r, uint32_t t, uint32_t experts)
{
	return cs_mix(cs_mix(seed ^ 0x6d6f65u) + r * 0x10001u + t * 0x9e3779b1u) % experts;
}

static inline uint32_t cs_moe_rank(uint32_t expert, uint32_t n)
{
	return expert % n;
}

#endif /* RNIC_TOOL_COLL_SCHED_H */
