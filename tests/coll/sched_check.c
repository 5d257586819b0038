// SPDX-License-Identifier: GPL-2.0
/*
 * Host-side check of guest-driver/tools/rnic_tool_coll_sched.h, compiled with the system cc
 * by tests/host_coll_sched.rs. Simulates the ring on contribution sets (bit r = rank r's
 * input) for N = 2..12 ranks and element counts that do and do not divide by N:
 *   - chunks cover [0, count) in order, without gaps or overlap, sizes differing by <= 1;
 *   - slices cover each chunk;
 *   - reduce-scatter: what rank r sends at step s is what rank r+1 expects to receive, it
 *     carries no contribution the receiver already has (each is added exactly once), and
 *     after N-1 steps rank r holds every contribution of chunk r;
 *   - all-gather: after N-1 steps every rank holds every complete chunk;
 *   - immediates round-trip; the f32 reference sum is exact.
 * Prints "sched N r s rs_send rs_recv ag_send ag_recv" lines for N = 3 and 4 (the Rust
 * side recomputes them independently), then "ok CHECKS" or "FAIL ..." lines.
 */
#include <stdio.h>
#include <stdlib.h>

#include "rnic_tool_coll_sched.h"

static unsigned long checks, fails;

#define CHECK(cond, ...) do { checks++; if (!(cond)) { fails++; printf("FAIL " __VA_ARGS__); printf("\n"); } } while (0)

static void ring(uint32_t n, uint64_t count)
{
	uint64_t have[CS_MAX_RANKS][CS_MAX_RANKS];	/* have[rank][chunk]: contribution bits */
	uint64_t all = (n == 64) ? ~0ull : (1ull << n) - 1, end = 0;
	uint32_t r, s, c;

	for (c = 0; c < n; c++) {
		uint64_t len = cs_chunk_len(count, n, c), slice = len / 3 + 1, covered = 0;
		uint32_t j;

		CHECK(cs_chunk_off(count, n, c) == end, "n %u count %llu chunk %u offset", n,
		      (unsigned long long)count, c);
		CHECK(len == count / n || len == count / n + 1, "n %u chunk %u len", n, c);
		end += len;
		for (j = 0; j < cs_nslices(len, slice); j++)
			covered += cs_slice_len(len, slice, j);
		CHECK(covered == len, "n %u chunk %u slices cover %llu of %llu", n, c,
		      (unsigned long long)covered, (unsigned long long)len);
	}
	CHECK(end == count, "n %u chunks end at %llu, count %llu", n, (unsigned long long)end,
	      (unsigned long long)count);

	for (r = 0; r < n; r++)
		for (c = 0; c < n; c++)
			have[r][c] = 1ull << r;
	for (s = 0; s + 1 < n; s++) {
		uint64_t msg[CS_MAX_RANKS];

		for (r = 0; r < n; r++)
			msg[r] = have[r][cs_rs_send_chunk(r, s, n)];
		for (r = 0; r < n; r++) {
			uint32_t to = (r + 1) % n, ch = cs_rs_send_chunk(r, s, n);

			CHECK(cs_rs_recv_chunk(to, s, n) == ch, "n %u rs step %u: rank %u sends chunk %u, rank %u expects %u",
			      n, s, r, ch, to, cs_rs_recv_chunk(to, s, n));
			CHECK((have[to][ch] & msg[r]) == 0, "n %u rs step %u: chunk %u reduced twice at rank %u",
			      n, s, ch, to);
			have[to][ch] |= msg[r];
		}
		/* a rank sends at step s+1 the chunk it reduced at step s */
		for (r = 0; s + 2 < n && r < n; r++)
			CHECK(cs_rs_send_chunk(r, s + 1, n) == cs_rs_recv_chunk(r, s, n), "n %u rs pipeline", n);
	}
	for (r = 0; r < n; r++)
		CHECK(have[r][r] == all, "n %u: rank %u does not own the full chunk %u", n, r, r);
	for (s = 0; s + 1 < n; s++) {
		uint64_t msg[CS_MAX_RANKS];

		for (r = 0; r < n; r++) {
			uint32_t ch = cs_ag_send_chunk(r, s, n);

			CHECK(have[r][ch] == all, "n %u ag step %u: rank %u forwards an incomplete chunk %u",
			      n, s, r, ch);
			msg[r] = have[r][ch];
		}
		for (r = 0; r < n; r++) {
			uint32_t to = (r + 1) % n, ch = cs_ag_send_chunk(r, s, n);

			CHECK(cs_ag_recv_chunk(to, s, n) == ch, "n %u ag step %u recv", n, s);
			have[to][ch] = msg[r];
		}
	}
	for (r = 0; r < n; r++)
		for (c = 0; c < n; c++)
			CHECK(have[r][c] == all, "n %u: rank %u misses chunk %u after all-gather", n, r, c);
}

int main(void)
{
	static const uint64_t counts[] = { 1, 2, 3, 5, 7, 64, 250000, 250001, 262144, 1000003 };
	uint32_t n, r, s, i;

	for (n = 3; n <= 4; n++)
		for (r = 0; r < n; r++)
			for (s = 0; s + 1 < n; s++)
				printf("sched %u %u %u %u %u %u %u\n", n, r, s, cs_rs_send_chunk(r, s, n),
				       cs_rs_recv_chunk(r, s, n), cs_ag_send_chunk(r, s, n),
				       cs_ag_recv_chunk(r, s, n));
	for (n = 2; n <= 12; n++)
		for (i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
			ring(n, counts[i]);
	ring(64, 1000003);

	for (i = 0; i < 100000; i += 7) {
		uint32_t it = i & 0xf, st = (i / 3) & 0xff, ch = (i / 5) & 0xff, sl = i & 0xfff;
		uint32_t imm = cs_imm(it, st, ch, sl);

		CHECK(cs_imm_iter(imm) == it && cs_imm_step(imm) == st && cs_imm_chunk(imm) == ch &&
		      cs_imm_slice(imm) == sl, "immediate 0x%08x", imm);
	}
	for (i = 0; i < 100000; i++) {
		double exact = 0;

		for (r = 0; r < 8; r++) {
			float v = cs_input(7, r, i);

			CHECK(v >= -512 && v <= 511 && v == (float)(int)v, "input %u not a small integer", i);
			exact += v;
		}
		CHECK((double)cs_sum_ref(7, 8, i) == exact, "reference sum of element %u", i);
	}
	{
		uint32_t hist[4] = { 0 };

		for (i = 0; i < 4096; i++)
			hist[cs_moe_rank(cs_moe_expert(1, 0, i, 8), 4)]++;
		for (r = 0; r < 4; r++)
			CHECK(hist[r] > 800 && hist[r] < 1250, "moe routing to rank %u: %u of 4096", r, hist[r]);
	}
	if (fails)
		printf("FAIL %lu of %lu checks\n", fails, checks);
	else
		printf("ok %lu\n", checks);
	return fails ? 1 : 0;
}
