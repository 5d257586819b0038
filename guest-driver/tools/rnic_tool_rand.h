/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The one seeded pseudo-random generator of the guest tools: splitmix64 (Steele, Lea and
 * Flood), 64 bits of state, one add and two multiply-xorshift rounds per draw. A given
 * seed always gives the same sequence (the state is the caller's, so each thread can
 * carry its own), and every seed, 0 included, is a good one. Not for anything that must
 * be unpredictable (PSNs use getrandom()). Header-only, like rnic_tool_verbs.h.
 */
#ifndef RNIC_TOOL_RAND_H
#define RNIC_TOOL_RAND_H

#include <stdint.h>

/* The next 64 random bits of the sequence whose state is *s. */
static inline uint64_t rr_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A number in 0..n-1 (0 when n is 0); the modulo bias is below 2^-32 for any n. */
static inline uint32_t rr_below(uint64_t *s, uint32_t n)
{
	return n ? (uint32_t)(rr_next(s) % n) : 0;
}

#endif /* RNIC_TOOL_RAND_H */
