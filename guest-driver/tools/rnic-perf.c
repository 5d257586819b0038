// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-perf: perftest-style bandwidth and latency over one rnic-emu RNIC, in loopback:
 * two QPs of /dev/rnic_emuN connected to each other. Static, libc only.
 *
 *   rnic-perf write|read|send|write-imm|write-lat|read-lat|send-lat|write-imm-lat [options]
 *
 * Data always flows from the "source" buffer to the "destination" buffer: WRITE and SEND
 * move QP A's source to QP B's destination, READ has QP A fetch B's source into its
 * destination. With --verify, the source slots hold a deterministic pattern, every
 * destination slot is poisoned (inverted pattern) before it is used, and checked after
 * each operation's completion, so every byte of every operation is verified.
 *
 * GPUDirect: --src gpu / --dst gpu put the source / destination buffer in GPU memory (a
 * mapping of /sys/bus/pci/devices/<gpu>/p2pmem/allocate of /dev/rnic_gpuN). The driver
 * reports each MR's path (host, p2p-switch, p2p-host-bridge, or bounce when Linux refuses
 * peer-to-peer DMA); bounce MRs are synchronised with MR_SYNC (TO_BOUNCE on the source
 * before posting, FROM_BOUNCE on the destination after the completion, before --verify).
 * The RNIC's per-path DMA counters (sysfs `stats`) are read before and after each run.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdlib.h>

#include "rnic_tool_verbs.h"

#define PERF_DEFAULT_ITERS	1000
#define PERF_DEFAULT_SIZE	65536
#define PERF_WINDOW		64		/* outstanding WRs (bandwidth) */
#define PERF_POST_BATCH		16		/* WRs per POST_SEND call */
#define PERF_BUF_BUDGET		(16u << 20)	/* bytes of slots per buffer */
#define PERF_SWEEP_MAX		(1u << 20)
#define PERF_STALL_NS		(10ull * 1000000000ull)	/* no completion for this long: error */
#define PERF_CQ_ENTRIES		256

enum perf_op { OP_WRITE, OP_READ, OP_SEND, OP_WRITE_IMM };

/* Operations that consume a RECV at the responder (and complete there). */
#define NEEDS_RECV(op) ((op) == OP_SEND || (op) == OP_WRITE_IMM)

struct perf_opts {
	const char *dev;
	enum perf_op op;
	bool lat;
	const char *test;
	uint64_t size;
	uint32_t iters;
	bool all, verify, json, use_inline, event;
	bool src_gpu, dst_gpu, strict;
	unsigned int src_gpu_n, dst_gpu_n;
};

/* The RNIC's DMA counters by path (sysfs stats), in this order. */
static const char *const perf_path_stats[] = {
	"dma_host_bytes", "dma_p2p_switch_bytes", "dma_p2p_root_complex_bytes",
};
#define PERF_NSTATS	3

struct perf {
	struct perf_opts o;
	int fd;
	struct rnic_query_device q;
	uint32_t pd, cq_a, cq_b, qp_a, qp_b, max_inline;
	uint8_t *src, *dst;
	size_t buf_len;
	struct rv_mr src_mr, dst_mr;
	struct rv_gpu src_gpu, dst_gpu;
	bool src_bounce, dst_bounce;
	char stats_path[160];
	unsigned long long stats0[PERF_NSTATS], delta[PERF_NSTATS];
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rnic-perf TEST [options]\n"
		"  TEST: write | read | send | write-imm (bandwidth),\n"
		"        write-lat | read-lat | send-lat | write-imm-lat (latency)\n"
		"  -s, --size BYTES   message size (K/M suffixes; default 64K; the top of -a)\n"
		"  -n, --iters N      operations per size (default %u)\n"
		"  -a, --all          sweep sizes 1 B .. 1 MiB (or -s) by powers of two\n"
		"      --verify       pattern-fill the source, check every byte at the destination\n"
		"      --json         one JSON object per result line\n"
		"      --inline       inline data when the size fits (write, send)\n"
		"      --event        sleep for completions (POLL_CQ timeout: arm + MSI-X) instead of busy polling\n"
		"  -d, --dev PATH     device (default " RV_DEFAULT_DEV ")\n"
		"      --src host|gpu where the data comes from (default host)\n"
		"      --dst host|gpu where the data lands (default host)\n"
		"      --src-gpu N, --dst-gpu N  which GPU (/dev/rnic_gpuN, default 0)\n"
		"      --strict-p2p   GPU memory: fail instead of falling back to a bounce buffer\n"
		"Exit status: 0 ok; 1 an error completion, lost/duplicate completion, mismatch or\n"
		"device error; 2 bad usage.\n", PERF_DEFAULT_ITERS);
}

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		return -1;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end)
		return -1;
	*out = v;
	return 0;
}

/* Outcome of checking one completion. */
static int check_wc(struct perf *p, const struct rnic_wc *wc, uint8_t *seen, uint32_t iters,
		    const char *side)
{
	if (wc->status != RNIC_WC_SUCCESS) {
		printf("completion error: test %s size %llu %s wr_id %llu status %s (%u) syndrome %s (%u) opcode %s\n",
		       p->o.test, (unsigned long long)p->o.size, side,
		       (unsigned long long)wc->wr_id, rv_wc_status_name(wc->status), wc->status,
		       rv_qp_err_name(wc->syndrome), wc->syndrome, rv_cqe_op_name(wc->opcode));
		return -1;
	}
	if (wc->wr_id >= iters) {
		printf("completion error: test %s %s: unknown wr_id %llu (only 0..%u posted)\n",
		       p->o.test, side, (unsigned long long)wc->wr_id, iters - 1);
		return -1;
	}
	if (seen[wc->wr_id]) {
		printf("completion error: test %s %s: wr_id %llu completed twice (duplicate)\n",
		       p->o.test, side, (unsigned long long)wc->wr_id);
		return -1;
	}
	seen[wc->wr_id] = 1;
	return 0;
}

static void report_lost(struct perf *p, const uint8_t *seen, uint32_t iters, const char *side)
{
	uint32_t i, lost = 0, first = 0;

	for (i = 0; i < iters; i++)
		if (!seen[i] && !lost++)
			first = i;
	printf("completion error: test %s size %llu %s: %u of %u wr_ids never completed (lost; first %u) within %llu s\n",
	       p->o.test, (unsigned long long)p->o.size, side, lost, iters, first,
	       PERF_STALL_NS / 1000000000ull);
}

/* Before the device reads source slot `slot`: a bounced source gets the GPU's bytes. */
static int src_ready(struct perf *p, uint32_t slot, uint64_t size)
{
	if (!p->src_bounce)
		return 0;
	return rv_mr_sync(p->fd, &p->src_mr, (uint64_t)slot * size, size, RNIC_MR_SYNC_TO_BOUNCE);
}

static int verify_slot(struct perf *p, uint32_t slot, uint64_t size, uint64_t iter);

/* After the device wrote destination slot `slot`: copy a bounce back, then --verify. */
static int dst_done(struct perf *p, uint32_t slot, uint64_t size, uint64_t iter)
{
	if (p->dst_bounce &&
	    rv_mr_sync(p->fd, &p->dst_mr, (uint64_t)slot * size, size, RNIC_MR_SYNC_FROM_BOUNCE))
		return -1;
	return p->o.verify ? verify_slot(p, slot, size, iter) : 0;
}

static void stats_read(struct perf *p, unsigned long long *v)
{
	int i;

	for (i = 0; i < PERF_NSTATS; i++)
		if (rv_read_stat(p->stats_path, perf_path_stats[i], &v[i]))
			v[i] = 0;
}

static void stats_begin(struct perf *p)
{
	stats_read(p, p->stats0);
}

static void stats_end(struct perf *p)
{
	unsigned long long now[PERF_NSTATS];
	int i;

	stats_read(p, now);
	for (i = 0; i < PERF_NSTATS; i++)
		p->delta[i] = now[i] - p->stats0[i];
}

static bool perf_fallback(const struct perf *p)
{
	return p->src_mr.path == RNIC_MR_PATH_BOUNCE || p->dst_mr.path == RNIC_MR_PATH_BOUNCE;
}

/* The placement and path fields that end every JSON object (without the closing brace). */
static void print_json_paths(const struct perf *p)
{
	printf(",\"src\":\"%s\",\"dst\":\"%s\",\"src_path\":\"%s\",\"dst_path\":\"%s\",\"bytes_host\":%llu,\"bytes_p2p_switch\":%llu,\"bytes_p2p_root_complex\":%llu,\"p2p_fallback\":%s}\n",
	       p->o.src_gpu ? "gpu" : "host", p->o.dst_gpu ? "gpu" : "host",
	       rv_mr_path_name(p->src_mr.path), rv_mr_path_name(p->dst_mr.path),
	       p->delta[0], p->delta[1], p->delta[2], perf_fallback(p) ? "true" : "false");
}

static void print_human_paths(const struct perf *p)
{
	printf(" %4s %4s %15s %15s %12llu %12llu %12llu %8s\n",
	       p->o.src_gpu ? "gpu" : "host", p->o.dst_gpu ? "gpu" : "host",
	       rv_mr_path_name(p->src_mr.path), rv_mr_path_name(p->dst_mr.path),
	       p->delta[0], p->delta[1], p->delta[2], perf_fallback(p) ? "yes" : "no");
}

#define HUMAN_PATH_HEADER " %4s %4s %15s %15s %12s %12s %12s %8s\n", "src", "dst", "src_path", \
	"dst_path", "bytes_host", "bytes_p2p_sw", "bytes_p2p_rc", "fallback"

/* Verifies destination slot `slot` (expects seed slot), then poisons it for reuse. */
static int verify_slot(struct perf *p, uint32_t slot, uint64_t size, uint64_t iter)
{
	uint8_t *d = p->dst + (size_t)slot * size;
	size_t bad = rv_pattern_check(d, size, slot);
	size_t i;

	if (bad != size) {
		printf("mismatch: test %s size %llu iteration %llu: destination offset %zu (slot %u): got 0x%02x want 0x%02x\n",
		       p->o.test, (unsigned long long)size, (unsigned long long)iter, bad, slot,
		       d[bad], rv_pattern_byte((uint32_t)bad, slot));
		return -1;
	}
	for (i = 0; i < size; i++)
		d[i] ^= 0xff;
	return 0;
}

static void prepare_slots(struct perf *p, uint32_t slots, uint64_t size)
{
	uint32_t j;
	size_t i;

	for (j = 0; j < slots; j++) {
		uint8_t *s = p->src + (size_t)j * size, *d = p->dst + (size_t)j * size;

		rv_pattern_fill(s, size, j);
		for (i = 0; i < size; i++)
			d[i] = (uint8_t)~s[i];
	}
}

static void build_wr(struct perf *p, struct rnic_send_wr *wr, uint64_t id, uint32_t slot,
		     uint64_t size)
{
	uint64_t off = (uint64_t)slot * size;

	memset(wr, 0, sizeof(*wr));
	wr->wr_id = id;
	wr->flags = RNIC_WQE_FLAG_SIGNALED;
	switch (p->o.op) {
	case OP_WRITE:
	case OP_SEND:
	case OP_WRITE_IMM:
		wr->opcode = p->o.op == OP_WRITE ? RNIC_WQE_OP_RDMA_WRITE :
			     p->o.op == OP_SEND ? RNIC_WQE_OP_SEND : RNIC_WQE_OP_RDMA_WRITE_IMM;
		wr->imm_data = (uint32_t)id;
		wr->remote_addr = (uintptr_t)p->dst + off;
		wr->rkey = p->dst_mr.rkey;
		if (p->o.use_inline && size <= p->max_inline) {
			wr->flags |= RNIC_WQE_FLAG_INLINE;
			wr->inline_data = (uintptr_t)p->src + off;
			wr->inline_len = (uint32_t)size;
		} else {
			wr->num_sge = 1;
			wr->sge[0].addr = (uintptr_t)p->src + off;
			wr->sge[0].length = (uint32_t)size;
			wr->sge[0].lkey = p->src_mr.lkey;
		}
		break;
	case OP_READ:
		wr->opcode = RNIC_WQE_OP_RDMA_READ;
		wr->remote_addr = (uintptr_t)p->src + off;
		wr->rkey = p->src_mr.rkey;
		wr->num_sge = 1;
		wr->sge[0].addr = (uintptr_t)p->dst + off;
		wr->sge[0].length = (uint32_t)size;
		wr->sge[0].lkey = p->dst_mr.lkey;
		break;
	}
}

static int post_recv_slot(struct perf *p, uint64_t id, uint32_t slot, uint64_t size)
{
	struct rnic_recv_wr r;

	memset(&r, 0, sizeof(r));
	r.wr_id = id;
	r.num_sge = 1;
	r.sge[0].addr = (uintptr_t)p->dst + (size_t)slot * size;
	r.sge[0].length = (uint32_t)size;
	r.sge[0].lkey = p->dst_mr.lkey;
	return rv_post_recv(p->fd, p->qp_b, &r, 1);
}

static uint32_t slots_for(struct perf *p, uint64_t size, uint32_t cap)
{
	uint64_t n = p->buf_len / size;

	if (n > cap)
		n = cap;
	return n ? (uint32_t)n : 1;
}

static int run_bw(struct perf *p, uint64_t size)
{
	uint32_t iters = p->o.iters, slots = slots_for(p, size, PERF_WINDOW);
	bool send = NEEDS_RECV(p->o.op);
	uint8_t *seen = calloc(iters, 1), *rseen = calloc(iters, 1);
	struct rnic_send_wr wrs[PERF_POST_BATCH];
	struct rnic_wc wcs[64];
	uint64_t posted = 0, done = 0, rposted = 0, rdone = 0, t0, t1, last;
	double secs, gbps, mops;
	int ret = 1, n, i;

	if (!seen || !rseen) {
		fprintf(stderr, "error: out of memory\n");
		goto out;
	}
	if (p->o.verify)
		prepare_slots(p, slots, size);

	stats_begin(p);
	t0 = rv_now_ns();
	last = t0;
	if (send)
		for (; rposted < iters && rposted < slots; rposted++)
			if (post_recv_slot(p, rposted, rposted % slots, size))
				goto out;

	while (done < iters || (send && rdone < iters)) {
		uint32_t batch = 0;

		while (posted + batch < iters && posted + batch - done < slots &&
		       batch < PERF_POST_BATCH && (!send || posted + batch < rposted)) {
			uint64_t id = posted + batch;

			build_wr(p, &wrs[batch], id, (uint32_t)(id % slots), size);
			if (src_ready(p, (uint32_t)(id % slots), size))
				goto out;
			batch++;
		}
		if (batch) {
			if (rv_post_send(p->fd, p->qp_a, wrs, batch))
				goto out;
			posted += batch;
		}

		/* --event: sleep (arm + MSI-X) when a completion is due; send sleeps on the RECV side. */
		n = rv_poll_cq(p->fd, p->cq_a, wcs, 64,
			       p->o.event && !send && done < posted ? 1000 : 0);
		if (n < 0)
			goto out;
		for (i = 0; i < n; i++) {
			if (check_wc(p, &wcs[i], seen, iters, "requester"))
				goto out;
			if (!send && dst_done(p, (uint32_t)(wcs[i].wr_id % slots), size, wcs[i].wr_id))
				goto out;
			done++;
			last = rv_now_ns();
		}

		if (send) {
			n = rv_poll_cq(p->fd, p->cq_b, wcs, 64,
				       p->o.event && rdone < posted ? 1000 : 0);
			if (n < 0)
				goto out;
			for (i = 0; i < n; i++) {
				if (check_wc(p, &wcs[i], rseen, iters, "responder"))
					goto out;
				if (p->o.op == OP_WRITE_IMM &&
				    (!(wcs[i].flags & RNIC_CQE_FLAG_IMM) ||
				     wcs[i].imm_data != (uint32_t)wcs[i].wr_id)) {
					printf("completion error: test %s responder wr_id %llu imm 0x%x flags 0x%x, expected imm 0x%x\n",
					       p->o.test, (unsigned long long)wcs[i].wr_id, wcs[i].imm_data,
					       wcs[i].flags, (uint32_t)wcs[i].wr_id);
					goto out;
				}
				if (wcs[i].byte_len != size) {
					printf("completion error: test %s responder wr_id %llu byte_len %u, expected %llu\n",
					       p->o.test, (unsigned long long)wcs[i].wr_id,
					       wcs[i].byte_len, (unsigned long long)size);
					goto out;
				}
				if (dst_done(p, (uint32_t)(wcs[i].wr_id % slots), size, wcs[i].wr_id))
					goto out;
				rdone++;
				last = rv_now_ns();
			}
			for (; rposted < iters && rposted - rdone < slots; rposted++)
				if (post_recv_slot(p, rposted, rposted % slots, size))
					goto out;
		}

		if (rv_now_ns() - last > PERF_STALL_NS) {
			if (done < iters)
				report_lost(p, seen, iters, "requester");
			if (send && rdone < iters)
				report_lost(p, rseen, iters, "responder");
			goto out;
		}
	}
	t1 = rv_now_ns();
	stats_end(p);

	secs = (double)(t1 - t0) / 1e9;
	gbps = (double)size * iters * 8 / 1e9 / secs;
	mops = iters / secs / 1e6;
	if (p->o.json)
		printf("{\"test\":\"%s\",\"size\":%llu,\"iterations\":%u,\"bytes_verified\":%llu,\"gbps\":%.3f,\"msg_rate_mops\":%.4f",
		       p->o.test, (unsigned long long)size, iters,
		       p->o.verify ? (unsigned long long)size * iters : 0ull, gbps, mops);
	else
		printf("%-10s %10llu %10u %16llu %10.3f %12.4f", p->o.test,
		       (unsigned long long)size, iters,
		       p->o.verify ? (unsigned long long)size * iters : 0ull, gbps, mops);
	if (p->o.json)
		print_json_paths(p);
	else
		print_human_paths(p);
	ret = 0;
out:
	free(seen);
	free(rseen);
	return ret;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double pct_us(const uint64_t *v, uint32_t n, uint32_t per_mille)
{
	uint64_t idx = (uint64_t)n * per_mille / 1000;

	if (idx >= n)
		idx = n - 1;
	return (double)v[idx] / 1000.0;
}

/* Busy-polls cq for one completion of wr_id id; 0 ok, -1 error (printed). */
static int wait_one(struct perf *p, uint32_t cqn, uint64_t id, uint64_t size, bool recv)
{
	struct rnic_wc wc;
	uint64_t start = rv_now_ns();
	int n;

	for (;;) {
		n = rv_poll_cq(p->fd, cqn, &wc, 1, p->o.event ? 1000 : 0);
		if (n < 0)
			return -1;
		if (n == 1)
			break;
		if (rv_now_ns() - start > PERF_STALL_NS) {
			printf("completion error: test %s size %llu %s: wr_id %llu never completed (lost) within %llu s\n",
			       p->o.test, (unsigned long long)size, recv ? "responder" : "requester",
			       (unsigned long long)id, PERF_STALL_NS / 1000000000ull);
			return -1;
		}
	}
	if (wc.status != RNIC_WC_SUCCESS) {
		printf("completion error: test %s size %llu %s wr_id %llu status %s (%u) syndrome %s (%u)\n",
		       p->o.test, (unsigned long long)size, recv ? "responder" : "requester",
		       (unsigned long long)wc.wr_id, rv_wc_status_name(wc.status), wc.status,
		       rv_qp_err_name(wc.syndrome), wc.syndrome);
		return -1;
	}
	if (wc.wr_id != id) {
		printf("completion error: test %s %s: got wr_id %llu, expected %llu (lost or duplicated)\n",
		       p->o.test, recv ? "responder" : "requester",
		       (unsigned long long)wc.wr_id, (unsigned long long)id);
		return -1;
	}
	if (recv && wc.byte_len != size) {
		printf("completion error: test %s responder wr_id %llu byte_len %u, expected %llu\n",
		       p->o.test, (unsigned long long)id, wc.byte_len, (unsigned long long)size);
		return -1;
	}
	return 0;
}

static int run_lat(struct perf *p, uint64_t size)
{
	uint32_t iters = p->o.iters, i;
	bool send = NEEDS_RECV(p->o.op);
	uint64_t *lat = calloc(iters, sizeof(*lat)), t0, sum = 0;
	struct rnic_send_wr wr;
	int ret = 1;

	if (!lat) {
		fprintf(stderr, "error: out of memory\n");
		return 1;
	}
	if (p->o.verify)
		prepare_slots(p, 1, size);

	stats_begin(p);
	for (i = 0; i < iters; i++) {
		if (send && post_recv_slot(p, i, 0, size))
			goto out;
		build_wr(p, &wr, i, 0, size);
		if (src_ready(p, 0, size))
			goto out;
		t0 = rv_now_ns();
		if (rv_post_send(p->fd, p->qp_a, &wr, 1))
			goto out;
		if (send) {
			if (wait_one(p, p->cq_b, i, size, true))
				goto out;
			lat[i] = rv_now_ns() - t0;
			if (wait_one(p, p->cq_a, i, size, false))
				goto out;
		} else {
			if (wait_one(p, p->cq_a, i, size, false))
				goto out;
			lat[i] = rv_now_ns() - t0;
		}
		sum += lat[i];
		if (dst_done(p, 0, size, i))
			goto out;
	}
	stats_end(p);

	qsort(lat, iters, sizeof(*lat), cmp_u64);
	if (p->o.json)
		printf("{\"test\":\"%s\",\"size\":%llu,\"iterations\":%u,\"p50_us\":%.2f,\"p99_us\":%.2f,\"p999_us\":%.2f,\"avg_us\":%.2f,\"bytes_verified\":%llu",
		       p->o.test, (unsigned long long)size, iters, pct_us(lat, iters, 500),
		       pct_us(lat, iters, 990), pct_us(lat, iters, 999),
		       (double)sum / iters / 1000.0,
		       p->o.verify ? (unsigned long long)size * iters : 0ull);
	else
		printf("%-10s %10llu %10u %10.2f %10.2f %10.2f %10.2f %16llu", p->o.test,
		       (unsigned long long)size, iters, pct_us(lat, iters, 500),
		       pct_us(lat, iters, 990), pct_us(lat, iters, 999),
		       (double)sum / iters / 1000.0,
		       p->o.verify ? (unsigned long long)size * iters : 0ull);
	if (p->o.json)
		print_json_paths(p);
	else
		print_human_paths(p);
	ret = 0;
out:
	free(lat);
	return ret;
}

static int setup(struct perf *p, uint64_t max_size)
{
	uint32_t access = RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE |
			  RNIC_ACCESS_REMOTE_READ;
	struct rnic_create_qp c;
	uint64_t slots = PERF_BUF_BUDGET / max_size;

	if (slots > PERF_WINDOW)
		slots = PERF_WINDOW;
	if (!slots)
		slots = 1;
	p->buf_len = (size_t)((slots * max_size + 4095) & ~4095ull);

	p->fd = rv_open(p->o.dev, &p->q);
	if (p->fd < 0)
		return -1;
	if (max_size > p->q.max_mr_size || max_size > 0x80000000ull) {
		fprintf(stderr, "error: size %llu is over the MR limit\n",
			(unsigned long long)max_size);
		return -1;
	}
	rv_dev_sysfs(p->o.dev, p->stats_path, sizeof(p->stats_path) - 8);
	strcat(p->stats_path, "/stats");
	if ((p->o.src_gpu && rv_gpu_open(p->o.src_gpu_n, &p->src_gpu)) ||
	    (p->o.dst_gpu && rv_gpu_open(p->o.dst_gpu_n, &p->dst_gpu)))
		return -1;
	p->src = p->o.src_gpu ? rv_gpu_alloc(&p->src_gpu, p->buf_len) : rv_alloc_buf(p->buf_len);
	p->dst = p->o.dst_gpu ? rv_gpu_alloc(&p->dst_gpu, p->buf_len) : rv_alloc_buf(p->buf_len);
	if (!p->src || !p->dst)
		return -1;
	if (rv_alloc_pd(p->fd, &p->pd) ||
	    rv_create_cq(p->fd, PERF_CQ_ENTRIES, &p->cq_a) ||
	    rv_create_cq(p->fd, PERF_CQ_ENTRIES, &p->cq_b) ||
	    rv_reg_mr_flags(p->fd, p->pd, p->src, p->buf_len, access,
			    p->o.strict ? RNIC_MR_FLAG_STRICT_P2P : 0, &p->src_mr) ||
	    rv_reg_mr_flags(p->fd, p->pd, p->dst, p->buf_len, access,
			    p->o.strict ? RNIC_MR_FLAG_STRICT_P2P : 0, &p->dst_mr))
		return -1;
	p->src_bounce = p->src_mr.path == RNIC_MR_PATH_BOUNCE;
	p->dst_bounce = p->dst_mr.path == RNIC_MR_PATH_BOUNCE;
	if (!p->o.json && (p->o.src_gpu || p->o.dst_gpu))
		printf("# src %s%s%s path %s; dst %s%s%s path %s\n",
		       p->o.src_gpu ? "gpu " : "host", p->o.src_gpu ? p->src_gpu.pci : "",
		       p->o.src_gpu ? "" : "", rv_mr_path_name(p->src_mr.path),
		       p->o.dst_gpu ? "gpu " : "host", p->o.dst_gpu ? p->dst_gpu.pci : "",
		       p->o.dst_gpu ? "" : "", rv_mr_path_name(p->dst_mr.path));

	memset(&c, 0, sizeof(c));
	c.pd = p->pd;
	c.max_send_wr = PERF_WINDOW;
	c.max_recv_wr = PERF_WINDOW;
	c.max_send_sge = 1;
	c.max_recv_sge = 1;
	c.max_inline = p->o.use_inline ? RNIC_UAPI_MAX_INLINE : 0;
	c.send_cqn = c.recv_cqn = p->cq_a;
	if (rv_create_qp(p->fd, &c))
		return -1;
	p->qp_a = c.qpn;
	p->max_inline = p->o.use_inline ? c.max_inline : 0;
	c.send_cqn = c.recv_cqn = p->cq_b;
	c.max_send_wr = PERF_WINDOW;
	c.max_recv_wr = PERF_WINDOW;
	c.max_send_sge = 1;
	c.max_recv_sge = 1;
	c.max_inline = 0;
	if (rv_create_qp(p->fd, &c))
		return -1;
	p->qp_b = c.qpn;

	access = RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ;
	if (rv_connect_qp(p->fd, p->qp_a, p->qp_b, access, 7, 10) ||
	    rv_connect_qp(p->fd, p->qp_b, p->qp_a, access, 7, 10))
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "size", required_argument, NULL, 's' },
		{ "iters", required_argument, NULL, 'n' },
		{ "all", no_argument, NULL, 'a' },
		{ "verify", no_argument, NULL, 'V' },
		{ "json", no_argument, NULL, 'j' },
		{ "inline", no_argument, NULL, 'I' },
		{ "dev", required_argument, NULL, 'd' },
		{ "event", no_argument, NULL, 'E' },
		{ "src", required_argument, NULL, 1000 },
		{ "dst", required_argument, NULL, 1001 },
		{ "src-gpu", required_argument, NULL, 1002 },
		{ "dst-gpu", required_argument, NULL, 1003 },
		{ "strict-p2p", no_argument, NULL, 1004 },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct perf p;
	uint64_t size, top, v;
	bool size_given = false;
	int c;

	memset(&p, 0, sizeof(p));
	p.o.dev = RV_DEFAULT_DEV;
	p.o.size = PERF_DEFAULT_SIZE;
	p.o.iters = PERF_DEFAULT_ITERS;

	if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	p.o.test = argv[1];
	if (!strcmp(p.o.test, "write") || !strcmp(p.o.test, "write-lat"))
		p.o.op = OP_WRITE;
	else if (!strcmp(p.o.test, "read") || !strcmp(p.o.test, "read-lat"))
		p.o.op = OP_READ;
	else if (!strcmp(p.o.test, "send") || !strcmp(p.o.test, "send-lat"))
		p.o.op = OP_SEND;
	else if (!strcmp(p.o.test, "write-imm") || !strcmp(p.o.test, "write-imm-lat"))
		p.o.op = OP_WRITE_IMM;
	else {
		fprintf(stderr, "rnic-perf: unknown test '%s'\n", p.o.test);
		usage(stderr);
		return 2;
	}
	p.o.lat = strstr(p.o.test, "-lat") != NULL;

	optind = 2;
	while ((c = getopt_long(argc, argv, "s:n:ad:h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (parse_size(optarg, &p.o.size) || !p.o.size ||
			    p.o.size > 0x80000000ull) {
				fprintf(stderr, "rnic-perf: bad size '%s' (1..2G)\n", optarg);
				return 2;
			}
			size_given = true;
			break;
		case 'n':
			if (parse_size(optarg, &v) || !v || v > 100000000) {
				fprintf(stderr, "rnic-perf: bad iteration count '%s'\n", optarg);
				return 2;
			}
			p.o.iters = (uint32_t)v;
			break;
		case 'a': p.o.all = true; break;
		case 'V': p.o.verify = true; break;
		case 'j': p.o.json = true; break;
		case 'I': p.o.use_inline = true; break;
		case 'E': p.o.event = true; break;
		case 'd': p.o.dev = optarg; break;
		case 1000:
		case 1001:
			if (strcmp(optarg, "host") && strcmp(optarg, "gpu")) {
				fprintf(stderr, "rnic-perf: --%s takes host or gpu\n",
					c == 1000 ? "src" : "dst");
				return 2;
			}
			*(c == 1000 ? &p.o.src_gpu : &p.o.dst_gpu) = !strcmp(optarg, "gpu");
			break;
		case 1002:
		case 1003:
			if (parse_size(optarg, &v) || v > 255) {
				fprintf(stderr, "rnic-perf: bad GPU number '%s'\n", optarg);
				return 2;
			}
			*(c == 1002 ? &p.o.src_gpu_n : &p.o.dst_gpu_n) = (unsigned int)v;
			break;
		case 1004: p.o.strict = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "rnic-perf: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}

	top = p.o.all ? (size_given ? p.o.size : PERF_SWEEP_MAX) : p.o.size;
	if (setup(&p, top))
		return 1;

	if (!p.o.json) {
		if (p.o.lat)
			printf("%-10s %10s %10s %10s %10s %10s %10s %16s", "test", "size", "iters",
			       "p50_us", "p99_us", "p999_us", "avg_us", "bytes_verified");
		else
			printf("%-10s %10s %10s %16s %10s %12s", "test", "size", "iters",
			       "bytes_verified", "Gb/s", "Mmsg/s");
		printf(HUMAN_PATH_HEADER);
	}
	for (size = p.o.all ? 1 : top; size <= top; size *= 2) {
		p.o.size = size;
		if (p.o.lat ? run_lat(&p, size) : run_bw(&p, size))
			return 1;
		fflush(stdout);
		if (!p.o.all)
			break;
	}
	return 0;
}
