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
 * With --json each result also carries the device's modelled hardware figures for the
 * same op, size and memories (rnic_tool_model.h, docs/timing.md): model_lat_us (one
 * message, doorbell to the CPU seeing its CQE) and model_gbps (a stream with the test's
 * window outstanding; latency tests: one), null when the device publishes no model.
 *
 * Multi-node (docs/fabric.md): `rnic-perf TEST --server [options]` on one node and
 * `rnic-perf TEST [options] PEER` on another (PEER: the server's node index or IPv4
 * address) run the test between the two nodes' RNICs over the fabric; they meet through
 * the host rendezvous store (rnic_tool_kv.h). See "multi-node" below.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/random.h>

#include "rnic_tool_kv.h"
#include "rnic_tool_model.h"
#include "rnic_tool_verbs.h"

#define PERF_DEFAULT_ITERS	1000
#define PERF_DEFAULT_SIZE	65536
#define PERF_WINDOW		64		/* outstanding WRs (bandwidth) */
#define PERF_POST_BATCH		16		/* WRs per POST_SEND call */
#define PERF_BUF_BUDGET		(16u << 20)	/* bytes of slots per buffer */
#define PERF_SWEEP_MAX		(1u << 20)
#define PERF_STALL_NS		(10ull * 1000000000ull)	/* no completion for this long: error */
#define PERF_CQ_ENTRIES		256
#define PERF_DEFAULT_MTU	4096
#define PERF_DEFAULT_TIMEOUT_S	120		/* rendezvous waits */
#define PERF_MAX_ID		32

enum perf_op { OP_WRITE, OP_READ, OP_SEND, OP_WRITE_IMM };

/* Operations that consume a RECV at the responder (and complete there). */
#define NEEDS_RECV(op) ((op) == OP_SEND || (op) == OP_WRITE_IMM)

enum perf_role { ROLE_LOOPBACK, ROLE_SERVER, ROLE_CLIENT };

struct perf_opts {
	const char *dev;
	enum perf_role role;
	const char *peer;		/* client: the server's node index or IPv4 address */
	uint32_t peer_ip;		/* client: PEER as given */
	bool peer_ip_given;
	int peer_node;
	const char *id;			/* rendezvous keys perf.<id>.* (default: the test) */
	uint32_t mtu;			/* path MTU in bytes */
	unsigned int timeout_s;		/* how long to wait for the peer */
	enum perf_op op;
	bool lat;
	const char *test;
	uint64_t size;
	uint64_t top;			/* the largest size of the run */
	uint32_t iters;
	bool all, verify, json, use_inline, event;
	bool src_gpu, dst_gpu, strict;
	unsigned int src_gpu_n, dst_gpu_n;
};

/* The RNIC's DMA counters by path (sysfs stats), then its packet counters (multi-node). */
static const char *const perf_path_stats[] = {
	"dma_host_bytes", "dma_p2p_switch_bytes", "dma_p2p_root_complex_bytes",
	"pkts_sent", "pkts_received", "pkts_dropped", "retransmits",
};
#define PERF_NSTATS	7

/* The peer's record from the rendezvous store (multi-node). */
struct perf_peer {
	char test[32], role[16];
	bool gpu;
	uint32_t path;			/* RNIC_MR_PATH_* of its buffer */
	uint32_t ip, qpn, psn, rkey, mtu, iters;
	int node, sweep, verify;
	uint64_t addr, len, size;
};

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
	struct rm_model model;		/* the device's model summary (--json columns) */

	/* multi-node: this side's one buffer, QP qp_a on CQ cq_a, and the peer */
	uint8_t *lbuf;
	uint64_t llen;
	struct rv_mr lmr;
	bool lgpu;
	struct rv_gpu lgpu_dev;
	uint32_t psn, path_mtu;
	struct perf_peer peer;
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
		"Multi-node (write, read, send and their -lat; docs/fabric.md):\n"
		"  rnic-perf TEST --server [options]       wait for a client on another node\n"
		"  rnic-perf TEST [options] PEER           client of the server on node PEER\n"
		"                                          (a node index, or its IPv4 address)\n"
		"      --loopback     two QPs of one RNIC (the default without PEER when the RNIC\n"
		"                     has no fabric address; with one, no PEER means --server)\n"
		"      --id NAME      rendezvous keys perf.NAME.* (default: the test name)\n"
		"      --mtu BYTES    path MTU 256..4096 (default %u)\n"
		"      --timeout SEC  how long to wait for the peer (default %u)\n"
		"Exit status: 0 ok; 1 an error completion, lost/duplicate completion, mismatch or\n"
		"device error; 2 bad usage.\n", PERF_DEFAULT_ITERS, PERF_DEFAULT_MTU,
		PERF_DEFAULT_TIMEOUT_S);
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
	       (p->o.role == ROLE_LOOPBACK ? PERF_STALL_NS :
		PERF_STALL_NS + (p->o.size >> 18) * 1000000000ull) / 1000000000ull);
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

/* The model columns of a JSON result: `window` messages outstanding, memories as placed
 * (a bounce MR is host memory). */
static void print_json_model(const struct perf *p, uint64_t size, bool src_gpu, bool dst_gpu,
			     unsigned int window)
{
	enum rm_op op = p->o.op == OP_READ ? RM_READ : p->o.op == OP_SEND ? RM_SEND : RM_WRITE;

	if (!p->model.ok) {
		printf(",\"model_lat_us\":null,\"model_gbps\":null");
		return;
	}
	printf(",\"model_lat_us\":%.4f,\"model_gbps\":%.3f",
	       rm_latency_ns(&p->model, op, src_gpu, dst_gpu, size) / 1000.0,
	       rm_stream_gbps(&p->model, op, src_gpu, dst_gpu, size, window));
}

/* Loads the device's model summary next to its stats file (none: null columns). */
static void model_load(struct perf *p)
{
	char dir[160];

	rv_dev_sysfs(p->o.dev, dir, sizeof(dir));
	if (rm_load(dir, &p->model) && p->o.json)
		fprintf(stderr, "note: no model summary in %s/config: model columns are null\n", dir);
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
	if (p->o.json) {
		print_json_model(p, size, p->o.src_gpu && !p->src_bounce,
				 p->o.dst_gpu && !p->dst_bounce, slots);
		print_json_paths(p);
	}
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
	if (p->o.json) {
		print_json_model(p, size, p->o.src_gpu && !p->src_bounce,
				 p->o.dst_gpu && !p->dst_bounce, 1);
		print_json_paths(p);
	}
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
	model_load(p);
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

/* ------------------------------------------------------------------ multi-node */

/*
 * Client and server on two nodes (perftest style). Each side has one QP, one CQ and one
 * buffer: for write and send the client's buffer is the source and the server's the
 * destination; for read the client reads the server's buffer (the source) into its own.
 * They exchange a record through the rendezvous store (perf.<id>.server, .client), connect
 * their QPs, and then run one phase per size: the server prepares its buffer (poisons it,
 * fills it, or posts RECVs) and puts perf.<id>.ready; the client runs the test and puts
 * perf.<id>.done ("ok" or "fail"). With -a, the phase keys end in .<size>.
 *
 * --verify data: iteration i of write and send carries the pattern with seed i, so the
 * receiving side knows which iteration each byte came from; read fetches server slot r,
 * which holds the pattern with seed r. write lands in server slot i % R (R slots: every
 * iteration when size x iterations fits PERF_VERIFY_BUDGET), verified after the run;
 * send lands in the buffer of RECV i, verified at its completion; read is verified by the
 * client at each completion.
 */

#define PERF_VERIFY_BUDGET	(64u << 20)	/* server buffer for write --verify */
#define PERF_RECV_AHEAD		(2 * PERF_WINDOW)	/* server RECVs for send */
#define PERF_RETRY_CNT		7
#define PERF_TIMEOUT		12		/* 4.096 us * 2^12 = 16.8 ms */
#define PERF_RNR_RETRY		7
#define PERF_RNR_TIMER_US	10

/*
 * Multi-node: how long without a completion is a loss. The emulated fabric moves a few
 * MB/s, with retransmissions: 10 s plus 1 s per 256 KiB of message.
 */
static uint64_t remote_stall_ns(uint64_t size)
{
	return PERF_STALL_NS + (size >> 18) * 1000000000ull;
}

static bool remote(const struct perf *p)
{
	return p->o.role != ROLE_LOOPBACK;
}

/* The one buffer of this side is the data source (else the destination). */
static bool local_is_src(const struct perf *p)
{
	return (p->o.role == ROLE_CLIENT) == (p->o.op != OP_READ);
}

/* Bytes of a side's window of slots for sizes up to top (as loopback). */
static uint64_t window_len(uint64_t top)
{
	uint64_t slots = PERF_BUF_BUDGET / top;

	if (slots > PERF_WINDOW)
		slots = PERF_WINDOW;
	if (!slots)
		slots = 1;
	return slots * top;
}

static uint64_t server_len(const struct perf_opts *o, uint64_t top)
{
	uint64_t len = window_len(top);

	if (o->op == OP_SEND)
		len *= 2;
	else if (o->op == OP_WRITE && o->verify) {
		uint64_t all = (uint64_t)o->iters * top;

		if (all > PERF_VERIFY_BUDGET)
			all = PERF_VERIFY_BUDGET;
		if (all > len)
			len = all;
	}
	return (len + 4095) & ~4095ull;
}

/* Slots of size bytes the server's buffer of len bytes has in this test. */
static uint32_t server_slots(const struct perf_opts *o, uint64_t len, uint64_t size)
{
	uint64_t n = len / size, cap = PERF_WINDOW;

	if (o->op == OP_SEND)
		cap = PERF_RECV_AHEAD;
	else if (o->op == OP_WRITE && o->verify)
		cap = o->iters;
	if (n > cap)
		n = cap;
	if (n > o->iters && o->op == OP_SEND)
		n = o->iters;
	return n ? (uint32_t)n : 1;
}

static void fill_inverted(uint8_t *d, size_t len, uint32_t seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		d[i] = (uint8_t)~rv_pattern_byte((uint32_t)i, seed);
}

static int check_pattern(struct perf *p, const uint8_t *d, uint64_t size, uint32_t seed,
			 uint64_t iter, uint32_t slot)
{
	size_t bad = rv_pattern_check(d, size, seed);

	if (bad == size)
		return 0;
	printf("mismatch: test %s role %s size %llu iteration %llu: buffer offset %zu (slot %u): got 0x%02x want 0x%02x\n",
	       p->o.test, p->o.role == ROLE_SERVER ? "server" : "client",
	       (unsigned long long)size, (unsigned long long)iter,
	       (size_t)slot * size + bad, slot, d[bad], rv_pattern_byte((uint32_t)bad, seed));
	return -1;
}

static int local_sync(struct perf *p, uint64_t off, uint64_t len, uint32_t dir)
{
	if (p->lmr.path != RNIC_MR_PATH_BOUNCE)
		return 0;
	return rv_mr_sync(p->fd, &p->lmr, off, len, dir);
}

/* "perf.<id>.<what>", with ".<size>" in a sweep (size 0: the records, never suffixed). */
static void perf_key(const struct perf *p, const char *what, uint64_t size, char *key)
{
	if (p->o.all && size)
		snprintf(key, RKV_MAX_KEY + 1, "perf.%s.%s.%llu", p->o.id, what,
			 (unsigned long long)size);
	else
		snprintf(key, RKV_MAX_KEY + 1, "perf.%s.%s", p->o.id, what);
}

static void record_encode(const struct perf *p, char *buf, size_t len)
{
	char ip[16];

	snprintf(buf, len,
		 "v=1,role=%s,node=%d,ip=%s,qpn=%u,psn=%u,rkey=0x%x,addr=0x%llx,len=%llu,mem=%s,path=%s,test=%s,size=%llu,iters=%u,sweep=%d,verify=%d,mtu=%u",
		 p->o.role == ROLE_SERVER ? "server" : "client",
		 p->q.node == RNIC_NODE_UNKNOWN ? -1 : (int)p->q.node,
		 rv_ipv4_str(p->q.ipv4, ip), p->qp_a, p->psn, p->lmr.rkey,
		 (unsigned long long)(uintptr_t)p->lbuf, (unsigned long long)p->llen,
		 p->lgpu ? "gpu" : "host", rv_mr_path_name(p->lmr.path), p->o.test,
		 (unsigned long long)p->o.top, p->o.iters, p->o.all, p->o.verify, p->o.mtu);
}

static uint32_t path_from_name(const char *s)
{
	uint32_t i;

	for (i = RNIC_MR_PATH_HOST; i <= RNIC_MR_PATH_BOUNCE; i++)
		if (!strcmp(s, rv_mr_path_name(i)))
			return i;
	return ~0u;
}

/* Parses the peer's record into p->peer; 0 or -1 (printed). */
static int record_decode(struct perf *p, const char *key, char *buf)
{
	struct perf_peer *r = &p->peer;
	char *tok, *save = NULL, *val;
	unsigned int seen = 0;
	unsigned long long v;

	memset(r, 0, sizeof(*r));
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		val = strchr(tok, '=');
		if (!val)
			goto bad;
		*val++ = '\0';
		if (!strcmp(tok, "test") || !strcmp(tok, "role") || !strcmp(tok, "mem") ||
		    !strcmp(tok, "path") || !strcmp(tok, "ip")) {
			if (!strcmp(tok, "test"))
				snprintf(r->test, sizeof(r->test), "%s", val);
			else if (!strcmp(tok, "role"))
				snprintf(r->role, sizeof(r->role), "%s", val);
			else if (!strcmp(tok, "mem"))
				r->gpu = !strcmp(val, "gpu");
			else if (!strcmp(tok, "path") && (r->path = path_from_name(val)) == ~0u)
				goto bad;
			else if (!strcmp(tok, "ip") && rv_parse_ipv4(val, &r->ip))
				goto bad;
			seen |= !strcmp(tok, "ip") ? 1 : 0;
			continue;
		}
		if (!strcmp(tok, "node")) {
			r->node = (int)strtol(val, NULL, 10);
			continue;
		}
		errno = 0;
		v = strtoull(val, &val, 0);
		if (errno || *val)
			goto bad;
		if (!strcmp(tok, "v") && v != 1) {
			printf("error: %s: record version %llu, this rnic-perf speaks 1\n", key, v);
			return -1;
		}
		if (!strcmp(tok, "qpn")) { r->qpn = (uint32_t)v; seen |= 2; }
		else if (!strcmp(tok, "psn")) { r->psn = (uint32_t)v; seen |= 4; }
		else if (!strcmp(tok, "rkey")) { r->rkey = (uint32_t)v; seen |= 8; }
		else if (!strcmp(tok, "addr")) { r->addr = v; seen |= 16; }
		else if (!strcmp(tok, "len")) { r->len = v; seen |= 32; }
		else if (!strcmp(tok, "size")) { r->size = v; seen |= 64; }
		else if (!strcmp(tok, "iters")) r->iters = (uint32_t)v;
		else if (!strcmp(tok, "sweep")) r->sweep = (int)v;
		else if (!strcmp(tok, "verify")) r->verify = (int)v;
		else if (!strcmp(tok, "mtu")) r->mtu = (uint32_t)v;
	}
	if (seen != 127 || r->psn > RNIC_PSN_MASK || !r->len || !r->ip)
		goto bad;
	return 0;
bad:
	printf("error: %s: malformed record from the rendezvous store\n", key);
	return -1;
}

/* Both sides must run the same test; 0 or -1 (printed). */
static int check_peer_params(struct perf *p, const char *key)
{
	const struct perf_peer *r = &p->peer;
	const char *want = p->o.role == ROLE_SERVER ? "client" : "server";

	if (strcmp(r->role, want)) {
		printf("error: %s: the record is a %s's, expected a %s's\n", key, r->role, want);
		return -1;
	}

	if (!strcmp(r->test, p->o.test) && r->size == p->o.top && r->iters == p->o.iters &&
	    r->sweep == p->o.all && r->verify == p->o.verify)
		return 0;
	printf("error: %s: the peer runs '%s -s %llu -n %u%s%s', this side '%s -s %llu -n %u%s%s': run both with the same test and options\n",
	       key, r->test, (unsigned long long)r->size, r->iters, r->sweep ? " -a" : "",
	       r->verify ? " --verify" : "", p->o.test, (unsigned long long)p->o.top, p->o.iters,
	       p->o.all ? " -a" : "", p->o.verify ? " --verify" : "");
	return -1;
}

/* Waits for the peer's record under key; 0 or -1 (printed). */
static int get_record(struct perf *p, const char *key)
{
	char val[RKV_MAX_VALUE + 1];
	int ret = rkv_get(key, p->o.timeout_s * 1000u, val, sizeof(val));

	if (ret == RKV_TIMEOUT)
		printf("error: no %s in the rendezvous store within %u s (is the peer running?)\n",
		       key, p->o.timeout_s);
	if (ret)
		return -1;
	return record_decode(p, key, val);
}

static uint32_t perf_psn(void)
{
	uint32_t v;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (uint32_t)(rv_now_ns() ^ ((uint64_t)getpid() << 20));
	return v & RNIC_PSN_MASK;
}

static int remote_setup(struct perf *p)
{
	uint32_t access = RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE |
			  RNIC_ACCESS_REMOTE_READ;
	bool server = p->o.role == ROLE_SERVER;
	struct rv_remote_attr ra;
	char key[RKV_MAX_KEY + 1], val[RKV_MAX_VALUE + 1], ip[16], pip[16];
	struct rnic_create_qp c;
	unsigned int gpu_n;

	p->fd = rv_open(p->o.dev, &p->q);
	if (p->fd < 0)
		return -1;
	if (!p->q.ipv4) {
		printf("error: %s has no fabric address (RNIC_REG_IPV4 is 0): multi-node runs need a topology with several nodes\n",
		       p->o.dev);
		return -1;
	}
	if (p->o.top > p->q.max_mr_size) {
		fprintf(stderr, "error: size %llu is over the MR limit\n",
			(unsigned long long)p->o.top);
		return -1;
	}
	rv_dev_sysfs(p->o.dev, p->stats_path, sizeof(p->stats_path) - 8);
	strcat(p->stats_path, "/stats");
	model_load(p);

	p->llen = server ? server_len(&p->o, p->o.top) : (window_len(p->o.top) + 4095) & ~4095ull;
	p->lgpu = local_is_src(p) ? p->o.src_gpu : p->o.dst_gpu;
	gpu_n = local_is_src(p) ? p->o.src_gpu_n : p->o.dst_gpu_n;
	if (p->lgpu) {
		if (rv_gpu_open(gpu_n, &p->lgpu_dev))
			return -1;
		p->lbuf = rv_gpu_alloc(&p->lgpu_dev, p->llen);
		if (p->lbuf)
			memset(p->lbuf, 0, p->llen);
	} else {
		p->lbuf = rv_alloc_buf(p->llen);
	}
	if (!p->lbuf)
		return -1;
	if (rv_alloc_pd(p->fd, &p->pd) ||
	    rv_create_cq(p->fd, PERF_CQ_ENTRIES, &p->cq_a) ||
	    rv_reg_mr_flags(p->fd, p->pd, p->lbuf, p->llen, access,
			    p->o.strict ? RNIC_MR_FLAG_STRICT_P2P : 0, &p->lmr))
		return -1;

	memset(&c, 0, sizeof(c));
	c.pd = p->pd;
	c.send_cqn = c.recv_cqn = p->cq_a;
	c.max_send_wr = PERF_WINDOW;
	c.max_recv_wr = PERF_RECV_AHEAD;
	c.max_send_sge = 1;
	c.max_recv_sge = 1;
	c.max_inline = p->o.use_inline ? RNIC_UAPI_MAX_INLINE : 0;
	if (rv_create_qp(p->fd, &c))
		return -1;
	p->qp_a = c.qpn;
	p->max_inline = p->o.use_inline ? c.max_inline : 0;
	if (rv_modify_qp(p->fd, p->qp_a, RNIC_QPS_INIT, RNIC_QP_ATTR_ACCESS, 0,
			 RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ, 0, 0))
		return -1;
	p->psn = perf_psn();

	/* Server: publish, then wait for the client. Client: the other way round. */
	if (server) {
		perf_key(p, "server", 0, key);
		record_encode(p, val, sizeof(val));
		if (rkv_put(key, val))
			return -1;
		perf_key(p, "client", 0, key);
		if (get_record(p, key) || check_peer_params(p, key))
			return -1;
	} else {
		perf_key(p, "server", 0, key);
		if (get_record(p, key))
			return -1;
		if (check_peer_params(p, key)) {
			/* Publish anyway: the server then sees the mismatch at once, not at its timeout. */
			perf_key(p, "client", 0, key);
			record_encode(p, val, sizeof(val));
			rkv_put(key, val);
			return -1;
		}
		if (p->o.peer_ip_given ? p->peer.ip != p->o.peer_ip :
					 p->peer.node != p->o.peer_node) {
			printf("error: %s was published by node %d (%s), not by the peer '%s': another server uses --id %s?\n",
			       key, p->peer.node, rv_ipv4_str(p->peer.ip, pip), p->o.peer, p->o.id);
			return -1;
		}
	}
	if (p->peer.ip == p->q.ipv4) {
		printf("error: the peer is this node (%s): run client and server on two nodes, or use loopback\n",
		       rv_ipv4_str(p->q.ipv4, ip));
		return -1;
	}

	memset(&ra, 0, sizeof(ra));
	ra.dest_qpn = p->peer.qpn;
	ra.dest_ip = p->peer.ip;
	ra.rq_psn = p->peer.psn;
	ra.sq_psn = p->psn;
	ra.path_mtu = p->peer.mtu && p->peer.mtu < p->o.mtu ? p->peer.mtu : p->o.mtu;
	ra.retry_cnt = PERF_RETRY_CNT;
	ra.timeout = PERF_TIMEOUT;
	ra.rnr_retry = PERF_RNR_RETRY;
	ra.rnr_timer_us = PERF_RNR_TIMER_US;
	if (rv_connect_qp_remote(p->fd, p->qp_a, &ra))
		return -1;
	p->path_mtu = ra.path_mtu;

	if (!server) {
		perf_key(p, "client", 0, key);
		record_encode(p, val, sizeof(val));
		if (rkv_put(key, val))
			return -1;
	}
	if (!p->o.json)
		printf("# role %s node %d (%s) qp %u psn 0x%06x; peer node %d (%s) qp %u psn 0x%06x; mtu %u; %s buffer %s%s path %s, peer %s path %s\n",
		       server ? "server" : "client",
		       p->q.node == RNIC_NODE_UNKNOWN ? -1 : (int)p->q.node,
		       rv_ipv4_str(p->q.ipv4, ip), p->qp_a, p->psn, p->peer.node,
		       rv_ipv4_str(p->peer.ip, pip), p->peer.qpn, p->peer.psn, p->path_mtu,
		       local_is_src(p) ? "src" : "dst", p->lgpu ? "gpu " : "host",
		       p->lgpu ? p->lgpu_dev.pci : "", rv_mr_path_name(p->lmr.path),
		       p->peer.gpu ? "gpu" : "host", rv_mr_path_name(p->peer.path));
	return 0;
}

/* The src/dst placement and paths of this run, seen from this side. */
static void remote_paths(const struct perf *p, bool *src_gpu, bool *dst_gpu, uint32_t *src_path,
			 uint32_t *dst_path)
{
	if (local_is_src(p)) {
		*src_gpu = p->lgpu;
		*src_path = p->lmr.path;
		*dst_gpu = p->peer.gpu;
		*dst_path = p->peer.path;
	} else {
		*src_gpu = p->peer.gpu;
		*src_path = p->peer.path;
		*dst_gpu = p->lgpu;
		*dst_path = p->lmr.path;
	}
}

static void print_remote_tail(const struct perf *p)
{
	uint32_t sp, dp;
	bool sg, dg, fb;
	char pip[16], ip[16];

	remote_paths(p, &sg, &dg, &sp, &dp);
	fb = sp == RNIC_MR_PATH_BOUNCE || dp == RNIC_MR_PATH_BOUNCE;
	if (p->o.json) {
		printf(",\"src\":\"%s\",\"dst\":\"%s\",\"src_path\":\"%s\",\"dst_path\":\"%s\",\"bytes_host\":%llu,\"bytes_p2p_switch\":%llu,\"bytes_p2p_root_complex\":%llu,\"p2p_fallback\":%s",
		       sg ? "gpu" : "host", dg ? "gpu" : "host", rv_mr_path_name(sp),
		       rv_mr_path_name(dp), p->delta[0], p->delta[1], p->delta[2],
		       fb ? "true" : "false");
		printf(",\"node\":%d,\"ip\":\"%s\",\"peer\":\"%s\",\"peer_node\":%d,\"mtu\":%u,\"pkts_sent\":%llu,\"pkts_received\":%llu,\"pkts_dropped\":%llu,\"retransmits\":%llu}\n",
		       p->q.node == RNIC_NODE_UNKNOWN ? -1 : (int)p->q.node,
		       rv_ipv4_str(p->q.ipv4, ip), rv_ipv4_str(p->peer.ip, pip), p->peer.node,
		       p->path_mtu, p->delta[3], p->delta[4], p->delta[5], p->delta[6]);
	} else {
		printf(" %4s %4s %15s %15s %12llu %12llu %12llu %8s %10llu %10llu\n",
		       sg ? "gpu" : "host", dg ? "gpu" : "host", rv_mr_path_name(sp),
		       rv_mr_path_name(dp), p->delta[0], p->delta[1], p->delta[2],
		       fb ? "yes" : "no", p->delta[3], p->delta[6]);
	}
}

/* Puts perf.<id>.done[.size]: "ok" or "fail". */
static int put_done(struct perf *p, uint64_t size, bool ok)
{
	char key[RKV_MAX_KEY + 1];

	perf_key(p, "done", size, key);
	return rkv_put(key, ok ? "ok" : "fail");
}

/* A client's run of one size: client_run and its steps. */
struct client_state {
	uint64_t size;
	uint32_t iters;
	uint32_t wslots;		/* this side's slots */
	uint32_t rslots;		/* the server's slots */
	uint32_t window;		/* WRs in flight at most */
	uint8_t *seen;			/* wr_ids completed */
	uint64_t *t_post, *lat;		/* per wr_id: post time; per completion: latency */
	uint64_t posted, done, last, sum, verified;
};

/* Before the first post: the peer's buffer fits, READ targets poisoned, the server ready. */
static int client_prepare(struct perf *p, struct client_state *cs)
{
	uint64_t size = cs->size;
	char key[RKV_MAX_KEY + 1], val[RKV_MAX_VALUE + 1];
	uint32_t j;
	int ret;

	if (p->o.op == OP_READ && (uint64_t)cs->rslots * size > p->peer.len) {
		printf("error: the server's buffer (%llu bytes) is too small for size %llu\n",
		       (unsigned long long)p->peer.len, (unsigned long long)size);
		return -1;
	}
	/* Source slots: any content without --verify (filled per iteration with it). */
	if (p->o.op == OP_READ) {
		for (j = 0; j < cs->wslots; j++)
			fill_inverted(p->lbuf + (size_t)j * size, size, j % cs->rslots);
		if (local_sync(p, 0, (uint64_t)cs->wslots * size, RNIC_MR_SYNC_TO_BOUNCE))
			return -1;
	}

	perf_key(p, "ready", size, key);
	ret = rkv_get(key, p->o.timeout_s * 1000u, val, sizeof(val));
	if (ret == RKV_TIMEOUT)
		printf("error: the server did not get ready (%s) within %u s\n", key,
		       p->o.timeout_s);
	return ret ? -1 : 0;
}

/* Work request `id` towards the server's slot id mod rslots; 0 or -1. */
static int client_fill_wr(struct perf *p, const struct client_state *cs, uint64_t id,
			  struct rnic_send_wr *wr)
{
	uint64_t size = cs->size;
	uint32_t ls = (uint32_t)(id % cs->wslots), rs = (uint32_t)(id % cs->rslots);
	uint8_t *l = p->lbuf + (size_t)ls * size;

	memset(wr, 0, sizeof(*wr));
	wr->wr_id = id;
	wr->flags = RNIC_WQE_FLAG_SIGNALED;
	wr->remote_addr = p->peer.addr + (uint64_t)rs * size;
	wr->rkey = p->peer.rkey;
	if (p->o.op == OP_READ) {
		wr->opcode = RNIC_WQE_OP_RDMA_READ;
	} else {
		wr->opcode = p->o.op == OP_SEND ? RNIC_WQE_OP_SEND : RNIC_WQE_OP_RDMA_WRITE;
		if (p->o.verify) {
			rv_pattern_fill(l, size, (uint32_t)id);
			if (local_sync(p, (uint64_t)ls * size, size, RNIC_MR_SYNC_TO_BOUNCE))
				return -1;
		}
	}
	if (p->o.op != OP_READ && p->o.use_inline && size <= p->max_inline) {
		wr->flags |= RNIC_WQE_FLAG_INLINE;
		wr->inline_data = (uintptr_t)l;
		wr->inline_len = (uint32_t)size;
	} else {
		wr->num_sge = 1;
		wr->sge[0].addr = (uintptr_t)l;
		wr->sge[0].length = (uint32_t)size;
		wr->sge[0].lkey = p->lmr.lkey;
	}
	return 0;
}

/* Posts up to PERF_POST_BATCH WRs, as many as the window allows; 0 or -1. */
static int client_post(struct perf *p, struct client_state *cs)
{
	struct rnic_send_wr wrs[PERF_POST_BATCH];
	uint32_t batch = 0, j;
	uint64_t now;

	while (cs->posted + batch < cs->iters && cs->posted + batch - cs->done < cs->window &&
	       batch < PERF_POST_BATCH) {
		if (client_fill_wr(p, cs, cs->posted + batch, &wrs[batch]))
			return -1;
		batch++;
	}
	if (!batch)
		return 0;
	now = rv_now_ns();
	for (j = 0; j < batch; j++)
		cs->t_post[cs->posted + j] = now;
	if (rv_post_send(p->fd, p->qp_a, wrs, batch))
		return -1;
	cs->posted += batch;
	return 0;
}

/* One completion: its latency; for READ the slot checked and poisoned again; 0 or -1. */
static int client_complete(struct perf *p, struct client_state *cs, const struct rnic_wc *wc)
{
	uint64_t size = cs->size, id = wc->wr_id;
	uint32_t ls;
	uint8_t *l;

	if (check_wc(p, wc, cs->seen, cs->iters, "requester"))
		return -1;
	cs->last = rv_now_ns();
	cs->lat[cs->done] = cs->last - cs->t_post[id];
	cs->sum += cs->lat[cs->done];
	cs->done++;
	if (p->o.op != OP_READ)
		return 0;
	ls = (uint32_t)(id % cs->wslots);
	l = p->lbuf + (size_t)ls * size;
	if (local_sync(p, (uint64_t)ls * size, size, RNIC_MR_SYNC_FROM_BOUNCE))
		return -1;
	if (p->o.verify) {
		if (check_pattern(p, l, size, (uint32_t)(id % cs->rslots), id, ls))
			return -1;
		cs->verified += size;
		/* poison for the read that reuses this slot */
		fill_inverted(l, size, (uint32_t)((id + cs->wslots) % cs->rslots));
		if (local_sync(p, (uint64_t)ls * size, size, RNIC_MR_SYNC_TO_BOUNCE))
			return -1;
	}
	return 0;
}

/* Reaps what completed (with --event, sleeps while WRs are outstanding); 0 or -1. */
static int client_poll(struct perf *p, struct client_state *cs)
{
	struct rnic_wc wcs[64];
	int n, i;

	n = rv_poll_cq(p->fd, p->cq_a, wcs, 64, p->o.event && cs->done < cs->posted ? 1000 : 0);
	if (n < 0)
		return -1;
	for (i = 0; i < n; i++)
		if (client_complete(p, cs, &wcs[i]))
			return -1;
	return 0;
}

/* The client's result line: latency percentiles or rates, then the remote columns. */
static void client_print(struct perf *p, struct client_state *cs, double secs)
{
	uint64_t size = cs->size, *lat = cs->lat;
	uint32_t iters = cs->iters;

	if (p->o.lat) {
		qsort(lat, iters, sizeof(*lat), cmp_u64);
		if (p->o.json)
			printf("{\"test\":\"%s\",\"role\":\"client\",\"size\":%llu,\"iterations\":%u,\"p50_us\":%.2f,\"p99_us\":%.2f,\"p999_us\":%.2f,\"avg_us\":%.2f,\"bytes_verified\":%llu",
			       p->o.test, (unsigned long long)size, iters, pct_us(lat, iters, 500),
			       pct_us(lat, iters, 990), pct_us(lat, iters, 999),
			       (double)cs->sum / iters / 1000.0, (unsigned long long)cs->verified);
		else
			printf("%-10s %10llu %10u %10.2f %10.2f %10.2f %10.2f %16llu", p->o.test,
			       (unsigned long long)size, iters, pct_us(lat, iters, 500),
			       pct_us(lat, iters, 990), pct_us(lat, iters, 999),
			       (double)cs->sum / iters / 1000.0, (unsigned long long)cs->verified);
	} else {
		double gbps = (double)size * iters * 8 / 1e9 / secs, mops = iters / secs / 1e6;

		if (p->o.json)
			printf("{\"test\":\"%s\",\"role\":\"client\",\"size\":%llu,\"iterations\":%u,\"bytes_verified\":%llu,\"gbps\":%.3f,\"msg_rate_mops\":%.4f",
			       p->o.test, (unsigned long long)size, iters,
			       (unsigned long long)cs->verified, gbps, mops);
		else
			printf("%-10s %10llu %10u %16llu %10.3f %12.4f", p->o.test,
			       (unsigned long long)size, iters, (unsigned long long)cs->verified,
			       gbps, mops);
	}
	if (p->o.json) {
		bool sg, dg;
		uint32_t sp, dp;

		remote_paths(p, &sg, &dg, &sp, &dp);
		print_json_model(p, size, sg && sp != RNIC_MR_PATH_BOUNCE,
				 dg && dp != RNIC_MR_PATH_BOUNCE, cs->window);
	}
	print_remote_tail(p);
}

/* Client, one size: bandwidth (window of slots) or latency (one at a time). */
static int client_run(struct perf *p, uint64_t size)
{
	struct client_state cs = {
		.size = size,
		.iters = p->o.iters,
		.wslots = slots_for(p, size, PERF_WINDOW),
		.rslots = server_slots(&p->o, p->peer.len, size),
	};
	uint64_t t0, t1;
	bool ok = false;

	cs.window = p->o.lat ? 1 : cs.wslots;
	cs.seen = calloc(cs.iters, 1);
	cs.t_post = calloc(cs.iters, sizeof(uint64_t));
	cs.lat = calloc(cs.iters, sizeof(uint64_t));
	if (!cs.seen || !cs.t_post || !cs.lat) {
		fprintf(stderr, "error: out of memory\n");
		goto out;
	}
	if (client_prepare(p, &cs))
		goto out;

	stats_begin(p);
	t0 = rv_now_ns();
	cs.last = t0;
	while (cs.done < cs.iters) {
		if (client_post(p, &cs) || client_poll(p, &cs))
			goto out;
		if (rv_now_ns() - cs.last > remote_stall_ns(size)) {
			report_lost(p, cs.seen, cs.iters, "requester");
			goto out;
		}
	}
	t1 = rv_now_ns();
	stats_end(p);
	ok = true;
	client_print(p, &cs, (double)(t1 - t0) / 1e9);
out:
	free(cs.seen);
	free(cs.t_post);
	free(cs.lat);
	/* The server waits for this either way. */
	if (put_done(p, size, ok))
		ok = false;
	return ok ? 0 : 1;
}

static int server_post_recv(struct perf *p, uint64_t id, uint32_t rslots, uint64_t size)
{
	struct rnic_recv_wr r;

	memset(&r, 0, sizeof(r));
	r.wr_id = id;
	r.num_sge = 1;
	r.sge[0].addr = (uintptr_t)p->lbuf + (id % rslots) * size;
	r.sge[0].length = (uint32_t)size;
	r.sge[0].lkey = p->lmr.lkey;
	return rv_post_recv(p->fd, p->qp_a, &r, 1);
}

/* Server, send: receives iters messages, verifying each at its completion. */
static int server_recv_all(struct perf *p, uint64_t size, uint32_t rslots, uint64_t *verified)
{
	uint32_t iters = p->o.iters;
	uint8_t *seen = calloc(iters, 1);
	struct rnic_wc wcs[64];
	uint64_t rdone = 0, rposted = rslots, last = rv_now_ns();
	uint64_t limit = (uint64_t)p->o.timeout_s * 1000000000ull;
	int n, i, ret = -1;

	if (!seen) {
		fprintf(stderr, "error: out of memory\n");
		return -1;
	}
	while (rdone < iters) {
		n = rv_poll_cq(p->fd, p->cq_a, wcs, 64, p->o.event ? 1000 : 0);
		if (n < 0)
			goto out;
		for (i = 0; i < n; i++) {
			uint64_t id = wcs[i].wr_id;
			uint32_t slot = (uint32_t)(id % rslots);
			uint8_t *d = p->lbuf + (size_t)slot * size;

			if (check_wc(p, &wcs[i], seen, iters, "responder"))
				goto out;
			if (id != rdone) {
				printf("completion error: test %s responder: RECV %llu completed before RECV %llu (out of order)\n",
				       p->o.test, (unsigned long long)id, (unsigned long long)rdone);
				goto out;
			}
			if (wcs[i].byte_len != size) {
				printf("completion error: test %s responder wr_id %llu byte_len %u, expected %llu\n",
				       p->o.test, (unsigned long long)id, wcs[i].byte_len,
				       (unsigned long long)size);
				goto out;
			}
			if (local_sync(p, (uint64_t)slot * size, size, RNIC_MR_SYNC_FROM_BOUNCE))
				goto out;
			if (p->o.verify) {
				if (check_pattern(p, d, size, (uint32_t)id, id, slot))
					goto out;
				*verified += size;
				fill_inverted(d, size, (uint32_t)(id + rslots));
				if (local_sync(p, (uint64_t)slot * size, size, RNIC_MR_SYNC_TO_BOUNCE))
					goto out;
			}
			rdone++;
			last = rv_now_ns();
			/* The first message may take the client's rendezvous round trip. */
			limit = remote_stall_ns(size);
			if (rposted < iters) {
				if (server_post_recv(p, rposted, rslots, size))
					goto out;
				rposted++;
			}
		}
		if (rv_now_ns() - last > limit) {
			report_lost(p, seen, iters, "responder");
			goto out;
		}
	}
	ret = 0;
out:
	free(seen);
	return ret;
}

/* Server, one size: prepare, put ready, wait for the data or done, verify, report. */
static int server_run(struct perf *p, uint64_t size)
{
	uint32_t iters = p->o.iters, rslots = server_slots(&p->o, p->llen, size), r;
	uint64_t verified = 0, last_i, used = rslots < iters ? rslots : iters;
	char key[RKV_MAX_KEY + 1], val[RKV_MAX_VALUE + 1];
	int ret;

	/* Prepare the buffer: poison what write/send will land in, fill what read fetches. */
	for (r = 0; r < rslots; r++) {
		uint8_t *d = p->lbuf + (size_t)r * size;

		if (p->o.op == OP_READ)
			rv_pattern_fill(d, size, r);
		else if (p->o.verify && p->o.op == OP_WRITE && r < iters)
			fill_inverted(d, size, (uint32_t)(r + (iters - 1 - r) / rslots * rslots));
		else if (p->o.verify)
			fill_inverted(d, size, r);
	}
	if (local_sync(p, 0, (uint64_t)rslots * size, RNIC_MR_SYNC_TO_BOUNCE))
		return 1;
	if (p->o.op == OP_SEND)
		for (r = 0; r < rslots; r++)
			if (server_post_recv(p, r, rslots, size))
				return 1;

	stats_begin(p);
	perf_key(p, "ready", size, key);
	if (rkv_put(key, "1"))
		return 1;
	if (p->o.op == OP_SEND && server_recv_all(p, size, rslots, &verified))
		return 1;

	perf_key(p, "done", size, key);
	ret = rkv_get(key, p->o.timeout_s * 1000u, val, sizeof(val));
	if (ret == RKV_TIMEOUT)
		printf("error: the client did not finish (%s) within %u s\n", key, p->o.timeout_s);
	if (ret)
		return 1;
	if (strcmp(val, "ok")) {
		printf("error: the client reported failure (%s = %s)\n", key, val);
		return 1;
	}
	stats_end(p);

	if (p->o.op == OP_WRITE && p->o.verify) {
		if (local_sync(p, 0, used * size, RNIC_MR_SYNC_FROM_BOUNCE))
			return 1;
		for (r = 0; r < used; r++) {
			last_i = r + (iters - 1 - r) / rslots * rslots;
			if (check_pattern(p, p->lbuf + (size_t)r * size, size, (uint32_t)last_i,
					  last_i, r))
				return 1;
			verified += size;
		}
	}

	if (p->o.json)
		printf("{\"test\":\"%s\",\"role\":\"server\",\"size\":%llu,\"iterations\":%u,\"bytes_verified\":%llu",
		       p->o.test, (unsigned long long)size, iters, (unsigned long long)verified);
	else
		printf("%-10s %10llu %10u %16llu %10s %12s", p->o.test, (unsigned long long)size,
		       iters, (unsigned long long)verified, "-", "-");
	print_remote_tail(p);
	return 0;
}

/* A trailing peer: a node index or an IPv4 address; 0 or -1. */
static int parse_peer(struct perf_opts *o, const char *s)
{
	char *end;
	long v;

	if (!rv_parse_ipv4(s, &o->peer_ip)) {
		o->peer_ip_given = true;
		return 0;
	}
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 0 || v > 0xffff)
		return -1;
	o->peer_node = (int)v;
	return 0;
}

static bool id_ok(const char *id)
{
	size_t i;

	for (i = 0; id[i]; i++)
		if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
		      (id[i] >= '0' && id[i] <= '9') || id[i] == '-' || id[i] == '_' ||
		      id[i] == '.') || i >= PERF_MAX_ID)
			return false;
	return i > 0;
}

static int remote_main(struct perf *p)
{
	uint64_t size;
	int ret;

	if (remote_setup(p))
		return 1;
	if (!p->o.json) {
		if (p->o.lat && p->o.role == ROLE_CLIENT)
			printf("%-10s %10s %10s %10s %10s %10s %10s %16s", "test", "size", "iters",
			       "p50_us", "p99_us", "p999_us", "avg_us", "bytes_verified");
		else
			printf("%-10s %10s %10s %16s %10s %12s", "test", "size", "iters",
			       "bytes_verified", "Gb/s", "Mmsg/s");
		printf(" %4s %4s %15s %15s %12s %12s %12s %8s %10s %10s\n", "src", "dst",
		       "src_path", "dst_path", "bytes_host", "bytes_p2p_sw", "bytes_p2p_rc",
		       "fallback", "pkts_sent", "retransmit");
	}
	for (size = p->o.all ? 1 : p->o.top; size <= p->o.top; size *= 2) {
		p->o.size = size;
		ret = p->o.role == ROLE_SERVER ? server_run(p, size) : client_run(p, size);
		fflush(stdout);
		if (ret)
			return 1;
		if (!p->o.all)
			break;
	}
	return 0;
}

/* parse_args: go on and run the test (anything else is the exit status). */
#define PERF_RUN	(-1)

static const struct option perf_longopts[] = {
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
	{ "server", no_argument, NULL, 1005 },
	{ "loopback", no_argument, NULL, 1006 },
	{ "id", required_argument, NULL, 1007 },
	{ "mtu", required_argument, NULL, 1008 },
	{ "timeout", required_argument, NULL, 1009 },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* The test (argv[1]) into o->test, o->op and o->lat; 0, or -1 when there is none such. */
static int parse_test(struct perf_opts *o, const char *test)
{
	o->test = test;
	if (!strcmp(test, "write") || !strcmp(test, "write-lat"))
		o->op = OP_WRITE;
	else if (!strcmp(test, "read") || !strcmp(test, "read-lat"))
		o->op = OP_READ;
	else if (!strcmp(test, "send") || !strcmp(test, "send-lat"))
		o->op = OP_SEND;
	else if (!strcmp(test, "write-imm") || !strcmp(test, "write-imm-lat"))
		o->op = OP_WRITE_IMM;
	else
		return -1;
	o->lat = strstr(test, "-lat") != NULL;
	return 0;
}

/*
 * After the options: the trailing PEER, the role (asks the RNIC whether it is on a
 * fabric), the combinations that exclude each other, and the defaults that depend on
 * other options. PERF_RUN or the exit status.
 */
static int finish_opts(struct perf_opts *o, int argc, char **argv, bool size_given,
		       bool loopback)
{
	if (optind + 1 == argc && o->role != ROLE_SERVER && !loopback) {
		o->peer = argv[optind++];
		if (parse_peer(o, o->peer)) {
			fprintf(stderr, "rnic-perf: bad peer '%s' (a node index or an IPv4 address)\n",
				o->peer);
			return 2;
		}
		o->role = ROLE_CLIENT;
	}
	if (optind != argc) {
		fprintf(stderr, "rnic-perf: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (o->role == ROLE_LOOPBACK && !loopback && o->op != OP_WRITE_IMM) {
		/* perftest semantics: without a peer, an RNIC on a fabric waits as the server. */
		struct rnic_query_device q;
		int fd = rv_open(o->dev, &q);

		if (fd >= 0) {
			if (q.ipv4)
				o->role = ROLE_SERVER;
			close(fd);
		}
	}
	if (loopback && o->role == ROLE_SERVER) {
		fprintf(stderr, "rnic-perf: --loopback and --server exclude each other\n");
		return 2;
	}
	if (o->role != ROLE_LOOPBACK && o->op == OP_WRITE_IMM) {
		fprintf(stderr, "rnic-perf: %s runs in loopback only (multi-node: write, read, send and their -lat)\n",
			o->test);
		return 2;
	}
	if (o->role == ROLE_LOOPBACK && (o->id || o->mtu != PERF_DEFAULT_MTU)) {
		fprintf(stderr, "rnic-perf: --id and --mtu are for --server or a client with a PEER\n");
		return 2;
	}
	if (!o->id)
		o->id = o->test;
	o->top = o->all ? (size_given ? o->size : PERF_SWEEP_MAX) : o->size;
	return PERF_RUN;
}

/* The command line into *o (zeroed by the caller); PERF_RUN or the exit status. */
static int parse_args(int argc, char **argv, struct perf_opts *o)
{
	bool size_given = false, loopback = false;
	uint64_t v;
	int c;

	o->dev = RV_DEFAULT_DEV;
	o->size = PERF_DEFAULT_SIZE;
	o->iters = PERF_DEFAULT_ITERS;
	o->mtu = PERF_DEFAULT_MTU;
	o->timeout_s = PERF_DEFAULT_TIMEOUT_S;

	if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (parse_test(o, argv[1])) {
		fprintf(stderr, "rnic-perf: unknown test '%s'\n", argv[1]);
		usage(stderr);
		return 2;
	}

	optind = 2;
	while ((c = getopt_long(argc, argv, "s:n:ad:h", perf_longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (parse_size(optarg, &o->size) || !o->size || o->size > 0x80000000ull) {
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
			o->iters = (uint32_t)v;
			break;
		case 'a': o->all = true; break;
		case 'V': o->verify = true; break;
		case 'j': o->json = true; break;
		case 'I': o->use_inline = true; break;
		case 'E': o->event = true; break;
		case 'd': o->dev = optarg; break;
		case 1000:
		case 1001:
			if (strcmp(optarg, "host") && strcmp(optarg, "gpu")) {
				fprintf(stderr, "rnic-perf: --%s takes host or gpu\n",
					c == 1000 ? "src" : "dst");
				return 2;
			}
			*(c == 1000 ? &o->src_gpu : &o->dst_gpu) = !strcmp(optarg, "gpu");
			break;
		case 1002:
		case 1003:
			if (parse_size(optarg, &v) || v > 255) {
				fprintf(stderr, "rnic-perf: bad GPU number '%s'\n", optarg);
				return 2;
			}
			*(c == 1002 ? &o->src_gpu_n : &o->dst_gpu_n) = (unsigned int)v;
			break;
		case 1004: o->strict = true; break;
		case 1005: o->role = ROLE_SERVER; break;
		case 1006: loopback = true; break;
		case 1007:
			if (!id_ok(optarg)) {
				fprintf(stderr, "rnic-perf: bad --id '%s' (1..%u of A-Z a-z 0-9 - _ .)\n",
					optarg, PERF_MAX_ID);
				return 2;
			}
			o->id = optarg;
			break;
		case 1008:
			if (parse_size(optarg, &v) || v < 256 || v > 4096 || (v & (v - 1))) {
				fprintf(stderr, "rnic-perf: bad --mtu '%s' (256, 512, 1024, 2048, 4096)\n",
					optarg);
				return 2;
			}
			o->mtu = (uint32_t)v;
			break;
		case 1009:
			if (parse_size(optarg, &v) || !v || v > RKV_MAX_TIMEOUT_MS / 1000) {
				fprintf(stderr, "rnic-perf: bad --timeout '%s' (1..%u s)\n", optarg,
					RKV_MAX_TIMEOUT_MS / 1000);
				return 2;
			}
			o->timeout_s = (unsigned int)v;
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	return finish_opts(o, argc, argv, size_given, loopback);
}

/* Loopback: two QPs of one RNIC, every size of the run. */
static int loopback_main(struct perf *p)
{
	uint64_t size, top = p->o.top;

	if (setup(p, top))
		return 1;
	if (!p->o.json) {
		if (p->o.lat)
			printf("%-10s %10s %10s %10s %10s %10s %10s %16s", "test", "size", "iters",
			       "p50_us", "p99_us", "p999_us", "avg_us", "bytes_verified");
		else
			printf("%-10s %10s %10s %16s %10s %12s", "test", "size", "iters",
			       "bytes_verified", "Gb/s", "Mmsg/s");
		printf(HUMAN_PATH_HEADER);
	}
	for (size = p->o.all ? 1 : top; size <= top; size *= 2) {
		p->o.size = size;
		if (p->o.lat ? run_lat(p, size) : run_bw(p, size))
			return 1;
		fflush(stdout);
		if (!p->o.all)
			break;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct perf p;
	int ret;

	memset(&p, 0, sizeof(p));
	ret = parse_args(argc, argv, &p.o);
	if (ret != PERF_RUN)
		return ret;
	return remote(&p) ? remote_main(&p) : loopback_main(&p);
}
