// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-coll: collectives over rnic-emu RNICs, GPU memory to GPU memory, one rank per node,
 * reported like nccl-tests. Static, libc only.
 *
 *   rnic-coll all_reduce|reduce_scatter|all_gather|all_to_all [-b MIN] [-e MAX] [-f F]
 *             [-n ITERS] [-w WARMUP] [-c 0|1] [--json] [options]
 *   rnic-coll moe [--tokens T] [--hidden H] [--experts E] [-n ITERS] [-w WARMUP]
 *   rnic-coll kv_transfer [--layers L] [--heads H] [--head-dim D] [--tokens T]
 *
 * Run the same command on every node; the rank is the node index (rnic_emu.node=N), the
 * number of ranks --ranks N (or rnic_coll.ranks=N on the kernel command line). Ranks meet
 * through the host rendezvous store (rnic_tool_coll.h) and build a mesh of RC QPs.
 *
 * all_reduce is the ring of rnic_tool_coll_sched.h: reduce-scatter, then all-gather, each
 * chunk cut into slices that move by RDMA WRITE WITH IMMEDIATE from this GPU's memory into
 * the next rank's GPU memory (the immediate names iteration, step, chunk and slice); the
 * receiver's GPU engine adds (REDUCE_SUM_F32) the landed slice to its own and the slice
 * moves on at once, so every step has several slices in flight. reduce_scatter and
 * all_gather are its two halves; all_to_all writes each block straight into its rank's
 * buffer. moe sends each token to the rank of its (seeded) expert, all tokens for one rank
 * gathered into multi-SGE SENDs into pre-posted RECVs, the expert doubles them on its GPU
 * and the combine SENDs them back into RECVs that scatter each token to its original slot.
 * kv_transfer has rank 0 (prefill) WRITE each layer's K and V blocks into rank 1's
 * (decode) GPU memory, the layer's index in the immediate of the V write.
 *
 * Results are checked (-c 1) against references computed from the seed on the CPU, never
 * by the device: inputs are small integers, so sums are exact in any order, and #wrong
 * counts elements that differ. Per-path DMA byte counters (sysfs stats) are read around
 * every size: with P2P no payload byte goes through host memory; when Linux refuses P2P
 * the MR is a host bounce buffer (MR_SYNC) and the counters show it.
 * With --json each ring or all_to_all row also carries modelled hardware figures from
 * the RNIC's model summary (rnic_tool_model.h, docs/timing.md): model_time_us and
 * model_busbw (null without a summary); moe and kv_transfer rows have none.
 * Exit status: 0 ok; 1 an error or a wrong result; 2 bad usage.
 */
#include <getopt.h>

#include "rnic_tool_coll.h"
#include "rnic_tool_model.h"

#define COLL_DEFAULT_BYTES	(1u << 20)
#define COLL_DEFAULT_SLICE	(256u << 10)
#define COLL_DEFAULT_TIMEOUT_S	300
#define COLL_POISON		(-77777.25f)
#define COLL_MAX_ID		32

enum coll_op { OP_ALL_REDUCE, OP_REDUCE_SCATTER, OP_ALL_GATHER, OP_ALL_TO_ALL, OP_MOE, OP_KV };

static const char *const op_names[] = {
	"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "moe", "kv_transfer",
};

struct opts {
	enum coll_op op;
	uint64_t minb, maxb, slice;
	uint32_t factor, iters, warmup, seed;
	bool check, json;
	bool inject;			/* test hook: rank 1 corrupts one input of checked calls */
	/* moe */
	uint32_t tokens, hidden, experts, sge;
	/* kv_transfer */
	uint32_t layers, heads, head_dim;
};

/* ------------------------------------------------------------------------------------ */
/* Buffers: regions of the command's GPU memory, the same layout on every rank.          */

struct bufs {
	float *a, *b, *scratch, *tmp;	/* send, receive, landing, reduce-scatter work */
	uint64_t region;		/* bytes of each region */
};

static uint64_t region_bytes(uint64_t max_bytes)
{
	return (max_bytes + 64 + 4095) & ~4095ull;
}

static void bufs_init(struct cm *c, struct bufs *b, uint64_t region, bool two_scratch)
{
	uint8_t *base = c->mem + ((c->ctl_len + 4095) & ~4095ull);

	b->region = region;
	b->a = (float *)base;
	b->b = (float *)(base + region);
	b->scratch = (float *)(base + 2 * region);
	b->tmp = (float *)(base + (two_scratch ? 4 : 3) * region);
}

/* Remote address of local pointer p in rank `to`'s memory (same layout). */
static uint64_t remote(const struct cm *c, uint32_t to, const void *p)
{
	return c->peer[to].addr + (uint64_t)((const uint8_t *)p - c->mem);
}

static int write_imm(struct cm *c, uint32_t to, const void *src, uint64_t len, const void *dst,
		     uint32_t imm, uint32_t opcode)
{
	struct rnic_send_wr wr;

	if (cm_to_dev(c, src, len))
		return -1;
	memset(&wr, 0, sizeof(wr));
	wr.opcode = (uint8_t)opcode;
	wr.imm_data = imm;
	wr.remote_addr = remote(c, to, dst);
	wr.rkey = c->peer[to].rkey;
	wr.num_sge = 1;
	wr.sge[0].addr = (uintptr_t)src;
	wr.sge[0].length = (uint32_t)len;
	wr.sge[0].lkey = c->mr.lkey;
	return cm_post_data(c, to, &wr);
}

static int post_imm_recvs(struct cm *c)
{
	uint32_t p, i;

	for (p = 0; p < c->n; p++)
		for (i = 0; p != c->rank && i < CM_DATA_RQ; i++)
			if (cm_post_imm_recv(c, p))
				return -1;
	return 0;
}

/* Runs rounds until *done is true (the handler sets it), then drains the sends. */
static int wait_round(struct cm *c, const bool *done, const char *what)
{
	uint64_t last = rv_now_ns();

	while (!*done) {
		int got = cm_poll(c, true);

		if (got < 0 || cm_stalled(c, &last, got, what))
			return -1;
	}
	return cm_drain_sends(c);
}

/* ------------------------------------------------------------------------------------ */
/* The ring: all_reduce, reduce_scatter, all_gather.                                      */

struct ring {
	enum coll_op op;
	struct bufs *bf;
	uint64_t count, slice;
	bool inplace, active, done;
	uint32_t iter;
	uint64_t expected, got;
	float *in, *work, *out, *rs_out;	/* see ring_layout() */
};

/*
 * in: this rank's input (all_gather: its own chunk only); work: where partial sums go;
 * out: where the all-gather phase lands (full buffer); rs_out: where reduce_scatter's
 * own chunk ends (relative to chunk r's offset).
 */
static void ring_layout(struct cm *c, struct ring *g)
{
	struct bufs *b = g->bf;
	uint64_t off_r = cs_chunk_off(g->count, c->n, c->rank);

	switch (g->op) {
	case OP_ALL_REDUCE:
		g->in = g->inplace ? b->b : b->a;
		g->work = g->out = g->rs_out = b->b;
		break;
	case OP_REDUCE_SCATTER:
		g->in = b->a;
		g->work = g->inplace ? b->a : b->tmp;
		g->rs_out = g->inplace ? b->a : b->b - off_r;
		g->out = NULL;
		break;
	default:
		g->out = b->b;
		g->in = g->inplace ? b->b + off_r : b->a;
		g->work = g->rs_out = NULL;
		break;
	}
}

static uint64_t slice_off(const struct ring *g, uint32_t n, uint32_t chunk, uint32_t j)
{
	return cs_chunk_off(g->count, n, chunk) + (uint64_t)j * g->slice;
}

/* Sends slice j of `chunk` at global step s to the next rank. */
static int ring_send(struct cm *c, struct ring *g, uint32_t s, uint32_t chunk, uint32_t j)
{
	uint32_t n = c->n, next = (c->rank + 1) % n;
	uint64_t len = cs_slice_len(cs_chunk_len(g->count, n, chunk), g->slice, j);
	uint64_t o = slice_off(g, n, chunk, j);
	const float *src;
	const float *dst;

	if (!len)
		return 0;
	if (s < n - 1) {
		src = s == 0 ? g->in + o : g->work + o;
		dst = g->bf->scratch + o;
	} else {
		if (s == n - 1 && g->op == OP_ALL_GATHER)
			src = g->in + (o - cs_chunk_off(g->count, n, chunk));
		else
			src = g->out + o;
		dst = g->out + o;
	}
	return write_imm(c, next, src, len * 4, dst, cs_imm(g->iter, s, chunk, j),
			 RNIC_WQE_OP_RDMA_WRITE_IMM);
}

static int ring_arrival(struct cm *c, struct ring *g, uint32_t imm)
{
	uint32_t n = c->n, s = cs_imm_step(imm), chunk = cs_imm_chunk(imm), j = cs_imm_slice(imm);
	uint32_t want;
	uint64_t len, o;

	if (s > 2 * n - 3) {
		printf("error: immediate 0x%08x: step %u of a %u-rank ring\n", imm, s, n);
		return -1;
	}
	want = s < n - 1 ? cs_rs_recv_chunk(c->rank, s, n) : cs_ag_recv_chunk(c->rank, s - (n - 1), n);
	len = cs_slice_len(cs_chunk_len(g->count, n, want), g->slice, j);
	if (chunk != want || !len) {
		printf("error: immediate 0x%08x: chunk %u slice %u at step %u, expected chunk %u\n",
		       imm, chunk, j, s, want);
		return -1;
	}
	o = slice_off(g, n, chunk, j);
	g->got++;
	if (s < n - 1) {
		float *land = g->bf->scratch + o;
		float *dst = s == n - 2 ? g->rs_out + o : g->work + o;

		if (cm_from_dev(c, land, len * 4) ||
		    cm_gpu(c, GPU_ENG_OP_REDUCE_SUM_F32, land, g->in + o, dst, len * 4))
			return -1;
		if (s < n - 2)
			return ring_send(c, g, s + 1, chunk, j);
		return g->op == OP_ALL_REDUCE ? ring_send(c, g, n - 1, chunk, j) : 0;
	}
	if (cm_from_dev(c, g->out + o, len * 4))
		return -1;
	return s < 2 * n - 3 ? ring_send(c, g, s + 1, chunk, j) : 0;
}

static int ring_on_recv(struct cm *c, const struct rnic_wc *wc, uint32_t from)
{
	struct ring *g = c->ctx;
	int ret = cm_imm_arrival(c, wc, from, (int)((c->rank + c->n - 1) % c->n), g->active,
				 g->iter, op_names[g->op]);

	if (ret <= 0)
		return ret;
	if (ring_arrival(c, g, wc->imm_data))
		return -1;
	g->done = g->got == g->expected;
	return 0;
}

static uint64_t ring_expected(struct cm *c, const struct ring *g)
{
	uint32_t n = c->n, s;
	uint64_t e = 0;

	for (s = 0; s + 1 < n; s++) {
		if (g->op != OP_ALL_GATHER)
			e += cs_nslices(cs_chunk_len(g->count, n, cs_rs_recv_chunk(c->rank, s, n)),
					g->slice);
		if (g->op != OP_REDUCE_SCATTER)
			e += cs_nslices(cs_chunk_len(g->count, n, cs_ag_recv_chunk(c->rank, s, n)),
					g->slice);
	}
	return e;
}

static int ring_unstash(struct cm *c, void *ctx, uint32_t from, uint32_t imm)
{
	(void)from;
	return ring_arrival(c, ctx, imm);
}

/* One collective call. */
static int ring_round(struct cm *c, struct ring *g)
{
	uint32_t n = c->n, r = c->rank, j, chunk, first;
	uint64_t len;

	g->iter++;
	g->got = 0;
	g->expected = ring_expected(c, g);
	g->active = true;
	g->done = g->expected == 0;
	if (g->op == OP_ALL_GATHER && !g->inplace &&
	    cm_gpu(c, GPU_ENG_OP_COPY, g->in, NULL, g->out + cs_chunk_off(g->count, n, r),
		   cs_chunk_len(g->count, n, r) * 4))
		return -1;
	/* Step 0 of the first phase: every slice at once. */
	first = g->op == OP_ALL_GATHER ? n - 1 : 0;
	chunk = g->op == OP_ALL_GATHER ? cs_ag_send_chunk(r, 0, n) : cs_rs_send_chunk(r, 0, n);
	len = cs_chunk_len(g->count, n, chunk);
	for (j = 0; j < cs_nslices(len, g->slice); j++)
		if (ring_send(c, g, first, chunk, j))
			return -1;
	/* Arrivals of this round that came early (while this rank was still in the last). */
	if (cm_unstash(c, g->iter, g, ring_unstash))
		return -1;
	g->done = g->got == g->expected;
	if (wait_round(c, &g->done, op_names[g->op]))
		return -1;
	g->active = false;
	return 0;
}

/* ------------------------------------------------------------------------------------ */
/* all_to_all: block p of the input goes to rank p.                                       */

struct a2a {
	struct bufs *bf;
	uint64_t blk;			/* elements per block */
	bool inplace, active, done;
	uint32_t iter, got;
};

/* Where rank from's block lands: in place, one of two scratch halves by iteration parity. */
static float *a2a_land(struct a2a *t, uint32_t iter, uint32_t from)
{
	if (!t->inplace)
		return t->bf->b + (uint64_t)from * t->blk;
	return t->bf->scratch + (uint64_t)(iter & 1) * (t->bf->region / 4) +
	       (uint64_t)from * t->blk;
}

static int a2a_arrival(struct cm *c, struct a2a *t, uint32_t from, uint32_t imm)
{
	if (cs_imm_chunk(imm) != from) {
		printf("error: all_to_all immediate 0x%08x from rank %u\n", imm, from);
		return -1;
	}
	t->got++;
	t->done = t->got == c->n - 1;
	return cm_from_dev(c, a2a_land(t, t->iter, from), t->blk * 4);
}

static int a2a_on_recv(struct cm *c, const struct rnic_wc *wc, uint32_t from)
{
	struct a2a *t = c->ctx;
	int ret = cm_imm_arrival(c, wc, from, -1, t->active, t->iter, "all_to_all");

	return ret <= 0 ? ret : a2a_arrival(c, t, from, wc->imm_data);
}

static int a2a_unstash(struct cm *c, void *ctx, uint32_t from, uint32_t imm)
{
	return a2a_arrival(c, ctx, from, imm);
}

static int a2a_round(struct cm *c, struct a2a *t)
{
	uint32_t n = c->n, r = c->rank, k, p;
	float *in = t->inplace ? t->bf->b : t->bf->a;
	uint64_t bytes = t->blk * 4;

	t->iter++;
	t->got = 0;
	t->active = true;
	t->done = false;
	for (k = 1; k < n; k++) {
		p = (r + k) % n;
		if (bytes && write_imm(c, p, in + (uint64_t)p * t->blk, bytes,
				       a2a_land(t, t->iter, r), cs_imm(t->iter, 0, r, 0),
				       RNIC_WQE_OP_RDMA_WRITE_IMM))
			return -1;
	}
	if (!bytes)
		t->done = true;
	if (cm_unstash(c, t->iter, t, a2a_unstash))
		return -1;
	if (wait_round(c, &t->done, "all_to_all"))
		return -1;
	t->active = false;
	if (!t->inplace)
		return cm_gpu(c, GPU_ENG_OP_COPY, in + (uint64_t)r * t->blk, NULL,
			      t->bf->b + (uint64_t)r * t->blk, bytes);
	for (p = 0; p < n; p++)
		if (p != r && cm_gpu(c, GPU_ENG_OP_COPY, a2a_land(t, t->iter, p), NULL,
				     t->bf->b + (uint64_t)p * t->blk, bytes))
			return -1;
	return 0;
}

/* ------------------------------------------------------------------------------------ */
/* The nccl-tests driver for the four bandwidth collectives.                             */

struct bw_run {
	enum coll_op op;
	struct bufs bf;
	struct ring ring;
	struct a2a a2a;
	uint64_t count;			/* elements of the whole buffer */
};

static int bw_round(struct cm *c, struct bw_run *w)
{
	return w->op == OP_ALL_TO_ALL ? a2a_round(c, &w->a2a) : ring_round(c, &w->ring);
}

static void fill(float *p, uint64_t n, uint32_t seed, uint32_t rank, uint64_t base)
{
	uint64_t i;

	for (i = 0; i < n; i++)
		p[i] = cs_input(seed, rank, base + i);
}

static void poison(float *p, uint64_t n)
{
	uint64_t i;

	for (i = 0; i < n; i++)
		p[i] = COLL_POISON;
}

static uint64_t count_wrong(const float *p, uint64_t n, float (*ref)(void *, uint64_t),
			    void *ctx, uint64_t *first)
{
	uint64_t i, wrong = 0;

	for (i = 0; i < n; i++)
		if (p[i] != ref(ctx, i) && !wrong++)
			*first = i;
	return wrong;
}

struct ref_ctx {
	struct cm *c;
	uint32_t seed;
	uint64_t count, base, blk;
	enum coll_op op;
};

static float ref_value(void *v, uint64_t i)
{
	struct ref_ctx *x = v;
	uint32_t n = x->c->n, r = x->c->rank, src;

	switch (x->op) {
	case OP_ALL_REDUCE:
	case OP_REDUCE_SCATTER:
		return cs_sum_ref(x->seed, n, x->base + i);
	case OP_ALL_GATHER:
		for (src = 0; src + 1 < n && cs_chunk_off(x->count, n, src + 1) <= i; src++)
			;
		return cs_input(x->seed, src, i);
	default:
		src = (uint32_t)(i / x->blk);
		return cs_input(x->seed, src, (uint64_t)r * x->blk + i % x->blk);
	}
}

/* Prepares inputs from the seed and poisons the outputs, runs one round, counts #wrong. */
static int bw_check(struct cm *c, struct bw_run *w, bool inplace, uint32_t seed, bool inject,
		    uint64_t *wrong)
{
	uint32_t n = c->n, r = c->rank;
	uint64_t count = w->count, off_r = cs_chunk_off(count, n, r);
	uint64_t len_r = cs_chunk_len(count, n, r), first = 0;
	struct ref_ctx x = { .c = c, .seed = seed, .count = count, .op = w->op };
	const float *res;
	uint64_t nres;
	float *in;

	switch (w->op) {
	case OP_ALL_REDUCE:
	case OP_REDUCE_SCATTER:
		in = inplace && w->op == OP_ALL_REDUCE ? w->bf.b : w->bf.a;
		fill(in, count, seed, r, 0);
		if (!inplace)
			poison(w->bf.b, count);
		break;
	case OP_ALL_GATHER:
		poison(w->bf.b, count);
		fill(inplace ? w->bf.b + off_r : w->bf.a, len_r, seed, r, off_r);
		break;
	default:
		x.blk = w->a2a.blk;
		fill(inplace ? w->bf.b : w->bf.a, count, seed, r, 0);
		if (!inplace)
			poison(w->bf.b, count);
		break;
	}
	/*
	 * --inject-error: rank 1's first input element is off by one behind the reference's
	 * back, so the check must find wrong elements (on every rank, for all_reduce).
	 */
	if (inject && r == 1) {
		in = w->op == OP_ALL_GATHER ? (inplace ? w->bf.b + off_r : w->bf.a) :
		     inplace && w->op != OP_REDUCE_SCATTER ? w->bf.b : w->bf.a;
		in[0] += 1.0f;
	}
	if (cm_barrier(c) || bw_round(c, w))
		return -1;
	if (w->op == OP_REDUCE_SCATTER) {
		res = inplace ? w->bf.a + off_r : w->bf.b;
		nres = len_r;
		x.base = off_r;
	} else {
		res = w->bf.b;
		nres = count;
	}
	*wrong = count_wrong(res, nres, ref_value, &x, &first);
	if (*wrong)
		printf("# rank %u %s %s: %llu wrong of %llu, first at element %llu: %g, expected %g\n",
		       r, op_names[w->op], inplace ? "in-place" : "out-of-place",
		       (unsigned long long)*wrong, (unsigned long long)nres,
		       (unsigned long long)first, res[first], ref_value(&x, first));
	return cm_barrier(c);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Per-call percentile (per mille) of sorted ns, in microseconds. */
static double pct_us(const uint64_t *ns, uint32_t n, uint32_t permille)
{
	uint64_t i = n ? ((uint64_t)n * permille + 999) / 1000 : 0;

	return n ? ns[i ? i - 1 : 0] / 1e3 : 0;
}

/* Timed rounds: average microseconds per call; pct[3]: this rank's P50/P99/P999. */
static int bw_time(struct cm *c, struct bw_run *w, const struct opts *o, double *us,
		   double *pct)
{
	uint64_t t0, t, *lat = calloc(o->iters ? o->iters : 1, sizeof(*lat));
	uint32_t i;
	int ret = -1;

	if (!lat || cm_barrier(c))
		goto out;
	for (i = 0; i < o->warmup; i++)
		if (bw_round(c, w))
			goto out;
	if (cm_barrier(c))
		goto out;
	t0 = t = rv_now_ns();
	for (i = 0; i < o->iters; i++) {
		uint64_t now;

		if (bw_round(c, w))
			goto out;
		now = rv_now_ns();
		lat[i] = now - t;
		t = now;
	}
	*us = o->iters ? (double)(rv_now_ns() - t0) / 1e3 / o->iters : 0;
	qsort(lat, o->iters, sizeof(*lat), cmp_u64);
	pct[0] = pct_us(lat, o->iters, 500);
	pct[1] = pct_us(lat, o->iters, 990);
	pct[2] = pct_us(lat, o->iters, 999);
	ret = 0;
out:
	free(lat);
	return ret;
}

static double bus_factor(enum coll_op op, uint32_t n)
{
	return op == OP_ALL_REDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
}

/*
 * Modelled time of one call (us), 0 without a model: a ring step is its first slice's
 * latency with the chunk's other slices streaming behind it, steps in sequence
 * (2(n-1) for all_reduce, n-1 for its halves); all_to_all is one block's latency with
 * the other n-2 streaming behind it. GPU memory unless the MR is a host bounce buffer;
 * the GPU's reductions and the bounce's staging copies are not counted.
 */
static double model_time_us(const struct cm *c, const struct rm_model *m, enum coll_op op,
			    uint64_t count, uint64_t slice)
{
	bool gpu = c->mr.path != RNIC_MR_PATH_BOUNCE;
	uint32_t n = c->n;
	uint64_t len, sl;
	double ns;

	if (!m->ok || n < 2)
		return 0;
	if (op == OP_ALL_TO_ALL) {
		len = count / n * 4;
		ns = rm_latency_ns(m, RM_WRITE, gpu, gpu, len) +
		     (n - 2) * rm_interval_ns(m, RM_WRITE, gpu, gpu, len);
	} else {
		len = cs_chunk_len(count, n, 0);
		sl = slice < len ? slice : len;
		ns = (rm_latency_ns(m, RM_WRITE, gpu, gpu, sl * 4) +
		      (cs_nslices(len, slice) - 1) * rm_interval_ns(m, RM_WRITE, gpu, gpu, sl * 4)) *
		     (op == OP_ALL_REDUCE ? 2 * (n - 1) : n - 1);
	}
	return ns / 1000.0;
}

static void print_header(const struct cm *c, const struct opts *o)
{
	const char *redop = o->op == OP_ALL_REDUCE || o->op == OP_REDUCE_SCATTER ? "sum" : "none";

	printf("# nccl-tests style: %s, %u ranks (one per node), float, redop %s\n",
	       op_names[o->op], c->n, redop);
	printf("# minBytes %llu maxBytes %llu step: %u(factor) warmup iters: %u iters: %u validation: %d\n",
	       (unsigned long long)o->minb, (unsigned long long)o->maxb, o->factor, o->warmup,
	       o->iters, o->check);
	printf("#\n");
	printf("#%12s %12s %8s %6s %6s %9s %8s %8s %6s %9s %8s %8s %6s\n", "", "", "", "", "",
	       "out-of-place", "", "", "", "in-place", "", "", "");
	printf("#%12s %12s %8s %6s %6s %9s %8s %8s %6s %9s %8s %8s %6s\n", "size", "count",
	       "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
	       "busbw", "#wrong");
	printf("#%12s %12s %8s %6s %6s %9s %8s %8s %6s %9s %8s %8s %6s\n", "(B)", "(elements)",
	       "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

/* Report fields every rank sends to rank 0 after each size. */
enum { RP_WRONG_OOP, RP_WRONG_IP, RP_US_OOP, RP_US_IP, RP_HOST, RP_P2P_SW, RP_P2P_RC, RP_RETX,
       RP_N };

/* Rank 0's sums over the sizes of a run, for the summary. */
struct bw_totals {
	uint64_t wrong, host, p2p, retx;
	double busbw_sum;
	uint32_t nsizes;
};

/*
 * Rank 0, after one size: every rank's report summed (time averaged over ranks, as
 * nccl-tests; #wrong summed), the row printed, the totals advanced. pct: rank 0's own
 * per-call percentiles, out-of-place and in-place.
 */
static void bw_report(const struct cm *c, const struct opts *o, const struct bw_run *w,
		      const struct rm_model *model, uint64_t bytes, double pct[2][3],
		      struct bw_totals *t)
{
	uint64_t host = 0, sw = 0, rc = 0, retx = 0, wrong[2] = { 0, 0 };
	double us[2] = { 0, 0 }, algbw[2], busbw[2];
	uint32_t n = c->n, place, p;

	for (p = 0; p < n; p++) {
		const uint64_t *rv = c->report[p].v;

		wrong[0] += rv[RP_WRONG_OOP];
		wrong[1] += rv[RP_WRONG_IP];
		us[0] += rv[RP_US_OOP] / 1000.0 / n;
		us[1] += rv[RP_US_IP] / 1000.0 / n;
		host += rv[RP_HOST];
		sw += rv[RP_P2P_SW];
		rc += rv[RP_P2P_RC];
		retx += rv[RP_RETX];
	}
	for (place = 0; place < 2; place++) {
		algbw[place] = us[place] > 0 ? bytes / us[place] / 1e3 : 0;
		busbw[place] = algbw[place] * bus_factor(o->op, n);
	}
	t->wrong += wrong[0] + wrong[1];
	t->host += host;
	t->p2p += sw + rc;
	t->retx += retx;
	t->busbw_sum += (busbw[0] + busbw[1]) / 2;
	t->nsizes++;
	if (o->json) {
		double mt = model_time_us(c, model, o->op, w->count, w->ring.slice);
		char mcol[96] = "\"model_time_us\":null,\"model_busbw\":null,";

		if (mt > 0)
			snprintf(mcol, sizeof(mcol), "\"model_time_us\":%.3f,\"model_busbw\":%.4f,",
				 mt, bytes / mt / 1e3 * bus_factor(o->op, n));
		printf("{\"op\":\"%s\",\"ranks\":%u,\"size\":%llu,\"count\":%llu,\"oop_time_us\":%.2f,\"oop_algbw\":%.4f,\"oop_busbw\":%.4f,\"oop_wrong\":%llu,\"ip_time_us\":%.2f,\"ip_algbw\":%.4f,\"ip_busbw\":%.4f,\"ip_wrong\":%llu,\"checked\":%s,\"bytes_host\":%llu,\"bytes_p2p_switch\":%llu,\"bytes_p2p_root_complex\":%llu,\"retransmits\":%llu,\"oop_p50_us\":%.2f,\"oop_p99_us\":%.2f,\"oop_p999_us\":%.2f,\"ip_p50_us\":%.2f,\"ip_p99_us\":%.2f,\"ip_p999_us\":%.2f,%s\"bytes_host_per_rank\":[",
		       op_names[o->op], n, (unsigned long long)bytes,
		       (unsigned long long)w->count, us[0], algbw[0], busbw[0],
		       (unsigned long long)wrong[0], us[1], algbw[1], busbw[1],
		       (unsigned long long)wrong[1], o->check ? "true" : "false",
		       (unsigned long long)host, (unsigned long long)sw,
		       (unsigned long long)rc, (unsigned long long)retx,
		       pct[0][0], pct[0][1], pct[0][2], pct[1][0], pct[1][1], pct[1][2],
		       mcol);
		for (p = 0; p < n; p++)
			printf("%s%llu", p ? "," : "",
			       (unsigned long long)c->report[p].v[RP_HOST]);
		printf("]}\n");
	} else {
		char w0[24] = "N/A", w1[24] = "N/A";

		if (o->check) {
			snprintf(w0, sizeof(w0), "%llu", (unsigned long long)wrong[0]);
			snprintf(w1, sizeof(w1), "%llu", (unsigned long long)wrong[1]);
		}
		printf(" %12llu %12llu %8s %6s %6d %9.1f %8.3f %8.3f %6s %9.1f %8.3f %8.3f %6s\n",
		       (unsigned long long)bytes, (unsigned long long)w->count, "float",
		       o->op == OP_ALL_REDUCE || o->op == OP_REDUCE_SCATTER ? "sum" : "none",
		       -1, us[0], algbw[0], busbw[0], w0, us[1], algbw[1], busbw[1], w1);
	}
	if (!o->json)
		printf("#   bytes by path (all ranks): host %llu, p2p-switch %llu, p2p-root-complex %llu; retransmits %llu; rank 0 per call P50/P99/P999 us: %.0f/%.0f/%.0f\n",
		       (unsigned long long)host, (unsigned long long)sw,
		       (unsigned long long)rc, (unsigned long long)retx, pct[0][0],
		       pct[0][1], pct[0][2]);
	fflush(stdout);
}

static int bw_main(struct cm *c, const struct opts *o)
{
	struct bw_run w;
	struct bw_totals t = { 0 };
	uint64_t size, own_wrong = 0;
	uint32_t n = c->n;
	int ret = 1;

	struct rm_model model;
	char dir[160];

	memset(&w, 0, sizeof(w));
	w.op = o->op;
	rv_dev_sysfs(c->dev, dir, sizeof(dir));
	if (rm_load(dir, &model) && o->json && c->rank == 0)
		fprintf(stderr, "note: no model summary in %s/config: model columns are null\n", dir);
	bufs_init(c, &w.bf, region_bytes(o->maxb), o->op == OP_ALL_TO_ALL);
	c->on_recv = o->op == OP_ALL_TO_ALL ? a2a_on_recv : ring_on_recv;
	c->ctx = o->op == OP_ALL_TO_ALL ? (void *)&w.a2a : (void *)&w.ring;
	if (post_imm_recvs(c))
		return 1;
	if (c->rank == 0 && !o->json)
		print_header(c, o);

	for (size = o->minb; size <= o->maxb; size = o->factor > 1 ? size * o->factor : size + 1) {
		unsigned long long s0[CM_NSTATS], s1[CM_NSTATS];
		uint64_t v[RP_N], wrong[2] = { 0, 0 }, bytes;
		double us[2] = { 0, 0 }, pct[2][3];
		uint32_t place;

		w.count = size / 4;
		if (o->op == OP_ALL_TO_ALL) {
			w.a2a.blk = w.count / n;
			w.count = w.a2a.blk * n;
		}
		bytes = w.count * 4;
		w.ring.op = o->op;
		w.ring.bf = &w.bf;
		w.ring.count = w.count;
		w.ring.slice = o->slice / 4;
		if (!w.ring.slice)
			w.ring.slice = 1;
		{
			uint64_t maxchunk = cs_chunk_len(w.count, n, 0);

			if (cs_nslices(maxchunk, w.ring.slice) > CS_MAX_SLICES)
				w.ring.slice = (maxchunk + CS_MAX_SLICES - 1) / CS_MAX_SLICES;
		}
		w.a2a.bf = &w.bf;

		cm_stats(c, s0);
		for (place = 0; place < 2; place++) {
			w.ring.inplace = w.a2a.inplace = place == 1;
			ring_layout(c, &w.ring);
			if (bw_time(c, &w, o, &us[place], pct[place]))
				return 1;
			if (o->check && bw_check(c, &w, place == 1, o->seed ^ (uint32_t)size,
						 o->inject, &wrong[place]))
				return 1;
		}
		cm_stats(c, s1);
		v[RP_WRONG_OOP] = wrong[0];
		v[RP_WRONG_IP] = wrong[1];
		v[RP_US_OOP] = (uint64_t)(us[0] * 1000);
		v[RP_US_IP] = (uint64_t)(us[1] * 1000);
		v[RP_HOST] = s1[0] - s0[0];
		v[RP_P2P_SW] = s1[1] - s0[1];
		v[RP_P2P_RC] = s1[2] - s0[2];
		v[RP_RETX] = s1[3] - s0[3];
		own_wrong += wrong[0] + wrong[1];
		if (cm_gather(c, v, RP_N))
			return 1;
		if (!c->rank)
			bw_report(c, o, &w, &model, bytes, pct, &t);
		/* -f 1: one size, on every rank (the others must not go on to size + 1). */
		if (o->factor <= 1)
			break;
	}
	if (cm_finish(c))
		return 1;
	ret = own_wrong ? 1 : 0;
	if (c->rank == 0) {
		if (o->json)
			printf("{\"op\":\"%s\",\"summary\":true,\"ranks\":%u,\"wrong\":%llu,\"avg_busbw\":%.4f,\"bytes_host\":%llu,\"bytes_p2p\":%llu,\"retransmits\":%llu,\"path\":\"%s\"}\n",
			       op_names[o->op], n, (unsigned long long)t.wrong,
			       t.nsizes ? t.busbw_sum / t.nsizes : 0, (unsigned long long)t.host,
			       (unsigned long long)t.p2p, (unsigned long long)t.retx,
			       rv_mr_path_name(c->mr.path));
		else {
			printf("# Out of bounds values : %llu %s\n", (unsigned long long)t.wrong,
			       t.wrong ? "FAILED" : "OK");
			printf("# Avg bus bandwidth    : %g \n", t.nsizes ? t.busbw_sum / t.nsizes : 0);
			printf("# GPU memory path: %s; payload bytes through host memory, all ranks: %llu\n",
			       rv_mr_path_name(c->mr.path), (unsigned long long)t.host);
		}
		ret = t.wrong ? 1 : 0;
	}
	return ret;
}

/* ------------------------------------------------------------------------------------ */
/* moe: token dispatch to experts and combine, multi-SGE SEND/RECV.                       */

struct moe {
	const struct opts *o;
	struct bufs bf;			/* a: my tokens, b: combined tokens, scratch: inbox */
	uint32_t *cnt;			/* cnt[s * n + d]: tokens of rank s for rank d */
	uint32_t *in_off;		/* first inbox slot of tokens from rank s */
	uint32_t in_total, sge;
	uint64_t tb;			/* bytes per token */
	uint64_t want[2], got[2];	/* RECVs of dispatch and combine */
	bool done;
};

static uint32_t moe_dest(const struct cm *c, const struct moe *m, uint32_t s, uint32_t t)
{
	return cs_moe_rank(cs_moe_expert(m->o->seed, s, t, m->o->experts), c->n);
}

static uint32_t wqes_for(uint32_t tokens, uint32_t sge)
{
	return (tokens + sge - 1) / sge;
}

static uint32_t ntok(uint32_t tokens, uint32_t sge, uint32_t k)
{
	return tokens - k * sge < sge ? tokens - k * sge : sge;
}

static int moe_on_recv(struct cm *c, const struct rnic_wc *wc, uint32_t from)
{
	struct moe *m = c->ctx;
	uint32_t phase = (uint32_t)(wc->wr_id >> 40), src = (uint32_t)(wc->wr_id >> 32) & 0xff;
	uint32_t k = (uint32_t)wc->wr_id, tokens;

	if (wc->opcode != RNIC_CQE_OP_RECV || phase > 1 || src != from) {
		printf("error: moe: unexpected %s from rank %u (wr_id 0x%llx)\n",
		       rv_cqe_op_name(wc->opcode), from, (unsigned long long)wc->wr_id);
		return -1;
	}
	tokens = phase ? m->cnt[c->rank * c->n + from] : m->cnt[from * c->n + c->rank];
	if (wc->byte_len != ntok(tokens, m->sge, k) * m->tb) {
		printf("error: moe: %s WQE %u from rank %u carried %u bytes, expected %llu\n",
		       phase ? "combine" : "dispatch", k, from, wc->byte_len,
		       (unsigned long long)(ntok(tokens, m->sge, k) * m->tb));
		return -1;
	}
	m->got[phase]++;
	m->done = m->got[0] == m->want[0] && m->got[1] == m->want[1];
	return 0;
}

static uint8_t *moe_token(struct moe *m, float *base, uint64_t slot)
{
	return (uint8_t *)base + slot * m->tb;
}

static int moe_post_recvs(struct cm *c, struct moe *m)
{
	uint32_t n = c->n, me = c->rank, p, k, t, i;
	struct rnic_recv_wr r;

	m->want[0] = m->want[1] = m->got[0] = m->got[1] = 0;
	for (p = 0; p < n; p++) {
		uint32_t din = m->cnt[p * n + me], dout = m->cnt[me * n + p];

		if (p == me)
			continue;
		/* dispatch from p: its tokens, contiguous in the inbox */
		for (k = 0; k < wqes_for(din, m->sge); k++) {
			memset(&r, 0, sizeof(r));
			r.wr_id = (uint64_t)p << 32 | k;
			r.num_sge = 1;
			r.sge[0].addr = (uintptr_t)moe_token(m, m->bf.scratch,
							     m->in_off[p] + (uint64_t)k * m->sge);
			r.sge[0].length = (uint32_t)(ntok(din, m->sge, k) * m->tb);
			r.sge[0].lkey = c->mr.lkey;
			if (rv_post_recv(c->fd, c->dqp[p], &r, 1))
				return -1;
			m->want[0]++;
		}
		/* combine from p: my tokens it hosts, each scattered back to its own slot */
		for (k = 0, t = 0; k < wqes_for(dout, m->sge); k++) {
			memset(&r, 0, sizeof(r));
			r.wr_id = 1ull << 40 | (uint64_t)p << 32 | k;
			for (i = 0; i < ntok(dout, m->sge, k); i++, t++) {
				while (moe_dest(c, m, me, t) != p)
					t++;
				r.sge[i].addr = (uintptr_t)moe_token(m, m->bf.b, t);
				r.sge[i].length = (uint32_t)m->tb;
				r.sge[i].lkey = c->mr.lkey;
			}
			r.num_sge = i;
			if (rv_post_recv(c->fd, c->dqp[p], &r, 1))
				return -1;
			m->want[1]++;
		}
	}
	m->done = m->want[0] == 0 && m->want[1] == 0;
	return 0;
}

/* Dispatch: all tokens for one rank in multi-SGE SENDs; returns WQEs posted or -1. */
static int64_t moe_dispatch(struct cm *c, struct moe *m)
{
	uint32_t n = c->n, me = c->rank, T = m->o->tokens, q, p, t;
	struct rnic_send_wr wr;
	int64_t wqes = 0;

	if (cm_to_dev(c, m->bf.a, (uint64_t)T * m->tb))
		return -1;
	for (q = 0; q < n; q++) {
		p = (me + q) % n;
		memset(&wr, 0, sizeof(wr));
		for (t = 0; t < T; t++) {
			if (moe_dest(c, m, me, t) != p)
				continue;
			if (p == me)
				break;	/* its own tokens stay: moe_expert_local() */
			wr.sge[wr.num_sge].addr = (uintptr_t)moe_token(m, m->bf.a, t);
			wr.sge[wr.num_sge].length = (uint32_t)m->tb;
			wr.sge[wr.num_sge].lkey = c->mr.lkey;
			if (++wr.num_sge == m->sge) {
				wr.opcode = RNIC_WQE_OP_SEND;
				if (cm_post_data(c, p, &wr))
					return -1;
				wqes++;
				memset(&wr, 0, sizeof(wr));
			}
		}
		if (wr.num_sge) {
			wr.opcode = RNIC_WQE_OP_SEND;
			if (cm_post_data(c, p, &wr))
				return -1;
			wqes++;
		}
	}
	return wqes;
}

static int moe_combine(struct cm *c, struct moe *m)
{
	uint32_t n = c->n, me = c->rank, p, k;
	struct rnic_send_wr wr;

	if (cm_to_dev(c, m->bf.scratch, (uint64_t)m->in_total * m->tb))
		return -1;
	for (p = 0; p < n; p++) {
		uint32_t tokens = m->cnt[p * n + me];

		if (p == me)
			continue;
		for (k = 0; k < wqes_for(tokens, m->sge); k++) {
			memset(&wr, 0, sizeof(wr));
			wr.opcode = RNIC_WQE_OP_SEND;
			wr.num_sge = 1;
			wr.sge[0].addr = (uintptr_t)moe_token(m, m->bf.scratch,
							      m->in_off[p] + (uint64_t)k * m->sge);
			wr.sge[0].length = (uint32_t)(ntok(tokens, m->sge, k) * m->tb);
			wr.sge[0].lkey = c->mr.lkey;
			if (cm_post_data(c, p, &wr))
				return -1;
		}
	}
	return 0;
}

/*
 * The expert on this rank's own tokens: they never leave; each run of consecutive own
 * tokens is doubled from the input straight into its output slots, one launch per run.
 */
static int moe_expert_local(struct cm *c, struct moe *m)
{
	uint32_t t = 0, end, T = m->o->tokens;

	while (t < T) {
		if (moe_dest(c, m, c->rank, t) != c->rank) {
			t++;
			continue;
		}
		for (end = t + 1; end < T && moe_dest(c, m, c->rank, end) == c->rank; end++)
			;
		if (cm_gpu(c, GPU_ENG_OP_REDUCE_SUM_F32, moe_token(m, m->bf.a, t),
			   moe_token(m, m->bf.a, t), moe_token(m, m->bf.b, t), (end - t) * m->tb))
			return -1;
		t = end;
	}
	return 0;
}

/* Tokens in the inbox that are not exactly their source's token (dispatch check). */
static uint64_t moe_check_inbox(struct cm *c, struct moe *m)
{
	uint32_t n = c->n, me = c->rank, s, t, i, H = m->o->hidden;
	uint64_t wrong = 0, k;

	for (s = 0; s < n; s++)
		for (t = 0, i = 0; s != me && t < m->o->tokens; t++) {
			const float *tok;

			if (moe_dest(c, m, s, t) != me)
				continue;
			tok = (const float *)moe_token(m, m->bf.scratch, m->in_off[s] + i++);
			for (k = 0; k < H; k++)
				if (tok[k] != cs_input(m->o->seed, s, (uint64_t)t * H + k)) {
					if (!wrong)
						printf("# rank %u moe dispatch: token %u of rank %u wrong at element %llu\n",
						       me, t, s, (unsigned long long)k);
					wrong++;
					break;
				}
		}
	return wrong;
}

/* Tokens that did not come back doubled (combine check). */
static uint64_t moe_check_out(struct cm *c, struct moe *m)
{
	uint32_t t, H = m->o->hidden;
	uint64_t wrong = 0, k;

	for (t = 0; t < m->o->tokens; t++) {
		const float *tok = (const float *)moe_token(m, m->bf.b, t);

		for (k = 0; k < H; k++)
			if (tok[k] != 2.0f * cs_input(m->o->seed, c->rank, (uint64_t)t * H + k)) {
				if (!wrong)
					printf("# rank %u moe combine: token %u wrong at element %llu\n",
					       c->rank, t, (unsigned long long)k);
				wrong++;
				break;
			}
	}
	return wrong;
}

/* One dispatch + expert + combine; times in ns. */
static int moe_round(struct cm *c, struct moe *m, bool check, uint64_t *t_disp, uint64_t *t_all,
		     int64_t *wqes, uint64_t *wrong)
{
	uint64_t t0, last;

	if (check) {
		poison(m->bf.scratch, (uint64_t)m->in_total * m->o->hidden);
		poison(m->bf.b, (uint64_t)m->o->tokens * m->o->hidden);
	}
	if (moe_post_recvs(c, m) || cm_barrier(c))
		return -1;
	t0 = rv_now_ns();
	*wqes = moe_dispatch(c, m);
	if (*wqes < 0)
		return -1;
	last = rv_now_ns();
	while (m->got[0] < m->want[0]) {
		int got = cm_poll(c, true);

		if (got < 0 || cm_stalled(c, &last, got, "moe dispatch"))
			return -1;
	}
	*t_disp = rv_now_ns() - t0;
	if (cm_from_dev(c, m->bf.scratch, (uint64_t)m->in_total * m->tb))
		return -1;
	if (check)
		*wrong += moe_check_inbox(c, m);
	/* The expert: doubles every token it received, on its GPU. */
	if (cm_gpu(c, GPU_ENG_OP_REDUCE_SUM_F32, m->bf.scratch, m->bf.scratch, m->bf.scratch,
		   (uint64_t)m->in_total * m->tb) ||
	    moe_combine(c, m) || moe_expert_local(c, m) ||
	    wait_round(c, &m->done, "moe combine"))
		return -1;
	*t_all = rv_now_ns() - t0;
	if (cm_from_dev(c, m->bf.b, (uint64_t)m->o->tokens * m->tb))
		return -1;
	if (check)
		*wrong += moe_check_out(c, m);
	return 0;
}

enum { MP_DISP_NS, MP_ALL_NS, MP_WRONG, MP_WQES, MP_REMOTE, MP_HOST, MP_P2P, MP_RETX, MP_N };

static int moe_main(struct cm *c, struct moe *m)
{
	const struct opts *o = m->o;
	uint32_t n = c->n, me = c->rank, s, t, i;
	uint64_t disp = 0, all = 0, wrong = 0, remote_tok = 0, v[MP_N], dn, an;
	unsigned long long s0[CM_NSTATS], s1[CM_NSTATS];
	int64_t wqes = 0, w;

	c->on_recv = moe_on_recv;
	c->ctx = m;
	for (t = 0; t < o->tokens; t++)
		remote_tok += moe_dest(c, m, me, t) != me;
	fill(m->bf.a, (uint64_t)o->tokens * o->hidden, o->seed, me, 0);
	cm_stats(c, s0);
	for (i = 0; i < o->warmup; i++)
		if (moe_round(c, m, false, &dn, &an, &w, &wrong))
			return 1;
	for (i = 0; i < o->iters; i++) {
		if (moe_round(c, m, false, &dn, &an, &w, &wrong))
			return 1;
		disp += dn;
		all += an;
		wqes = w;
	}
	if (o->check && moe_round(c, m, true, &dn, &an, &w, &wrong))
		return 1;
	cm_stats(c, s1);
	v[MP_DISP_NS] = o->iters ? disp / o->iters : dn;
	v[MP_ALL_NS] = o->iters ? all / o->iters : an;
	v[MP_WRONG] = wrong;
	v[MP_WQES] = (uint64_t)(o->iters ? wqes : w);
	v[MP_REMOTE] = remote_tok;
	v[MP_HOST] = s1[0] - s0[0];
	v[MP_P2P] = s1[1] - s0[1] + s1[2] - s0[2];
	v[MP_RETX] = s1[3] - s0[3];
	if (cm_gather(c, v, MP_N) || cm_finish(c))
		return 1;
	if (me == 0) {
		double d_us = 0, a_us = 0, algbw, busbw, calgbw, tps, wpt;
		uint64_t tw = 0, twq = 0, trem = 0, host = 0, p2p = 0, retx = 0;
		uint64_t bytes = (uint64_t)o->tokens * m->tb;

		for (s = 0; s < n; s++) {
			const uint64_t *rv = c->report[s].v;

			d_us += rv[MP_DISP_NS] / 1e3 / n;
			a_us += rv[MP_ALL_NS] / 1e3 / n;
			tw += rv[MP_WRONG];
			twq += rv[MP_WQES];
			trem += rv[MP_REMOTE];
			host += rv[MP_HOST];
			p2p += rv[MP_P2P];
			retx += rv[MP_RETX];
		}
		algbw = d_us > 0 ? bytes / d_us / 1e3 : 0;
		busbw = algbw * (n - 1) / n;
		calgbw = a_us > d_us ? bytes / (a_us - d_us) / 1e3 : 0;
		tps = a_us > 0 ? (double)o->tokens * n / (a_us / 1e6) : 0;
		wpt = trem ? (double)twq / trem : 0;
		if (o->json) {
			printf("{\"op\":\"moe\",\"ranks\":%u,\"tokens\":%u,\"hidden\":%u,\"experts\":%u,\"size\":%llu,\"dispatch_us\":%.2f,\"algbw\":%.4f,\"busbw\":%.4f,\"combine_us\":%.2f,\"combine_algbw\":%.4f,\"total_us\":%.2f,\"tokens_per_s\":%.1f,\"wqes\":%llu,\"remote_tokens\":%llu,\"wqes_per_token\":%.4f,\"wrong\":%llu,\"checked\":%s,\"bytes_host\":%llu,\"bytes_p2p\":%llu,\"retransmits\":%llu,\"path\":\"%s\"}\n",
			       n, o->tokens, o->hidden, o->experts, (unsigned long long)bytes, d_us,
			       algbw, busbw, a_us - d_us, calgbw, a_us, tps,
			       (unsigned long long)twq, (unsigned long long)trem, wpt,
			       (unsigned long long)tw, o->check ? "true" : "false",
			       (unsigned long long)host, (unsigned long long)p2p,
			       (unsigned long long)retx, rv_mr_path_name(c->mr.path));
		} else {
			printf("# rnic-coll moe: %u ranks, %u tokens per rank, hidden %u floats, %u experts (expert e on rank e mod %u), seed %u\n",
			       n, o->tokens, o->hidden, o->experts, n, o->seed);
			printf("# tokens routed rank -> rank (rows: source):\n");
			for (s = 0; s < n; s++) {
				printf("#   %2u:", s);
				for (t = 0; t < n; t++)
					printf(" %6u", m->cnt[s * n + t]);
				printf("\n");
			}
			printf("#%12s %8s %8s %10s %8s %8s %10s %8s %12s %10s %6s\n", "size", "tokens",
			       "hidden", "dispatch", "algbw", "busbw", "combine", "algbw",
			       "tokens/s", "wqe/token", "#wrong");
			printf("#%12s %8s %8s %10s %8s %8s %10s %8s %12s %10s %6s\n", "(B)", "/rank",
			       "", "(us)", "(GB/s)", "(GB/s)", "(us)", "(GB/s)", "", "", "");
			printf(" %12llu %8u %8u %10.1f %8.3f %8.3f %10.1f %8.3f %12.1f %10.4f %6llu\n",
			       (unsigned long long)bytes, o->tokens, o->hidden, d_us, algbw, busbw,
			       a_us - d_us, calgbw, tps, wpt, (unsigned long long)tw);
			printf("# %llu dispatch WQEs for %llu remote tokens (one SEND per token: %llu)\n",
			       (unsigned long long)twq, (unsigned long long)trem,
			       (unsigned long long)trem);
			printf("#   bytes by path (all ranks): host %llu, p2p %llu; retransmits %llu\n",
			       (unsigned long long)host, (unsigned long long)p2p,
			       (unsigned long long)retx);
			printf("# Out of bounds values : %llu %s\n", (unsigned long long)tw,
			       tw ? "FAILED" : "OK");
			printf("# Avg bus bandwidth    : %g \n", busbw);
		}
		return tw ? 1 : 0;
	}
	return wrong ? 1 : 0;
}

/* ------------------------------------------------------------------------------------ */
/* kv_transfer: prefill (rank 0) writes every layer's K and V into decode's (rank 1) GPU. */

struct kv {
	const struct opts *o;
	uint8_t *cache;			/* [layer][K, V][block] */
	uint64_t block;			/* bytes of one K or V block */
	uint64_t t0, arrive[4096];
	uint32_t iter, got;
	uint64_t wrong;
	bool active, done, check;
};

static uint32_t kv_seed(const struct kv *k, uint32_t layer, uint32_t v)
{
	return k->o->seed * 8192u + layer * 2 + v;
}

static int kv_layer(struct cm *c, struct kv *k, uint32_t layer)
{
	uint8_t *p = k->cache + (uint64_t)layer * 2 * k->block;
	uint32_t v;

	if (layer >= k->o->layers || k->arrive[layer]) {
		printf("error: kv_transfer: layer %u arrived %s\n", layer,
		       layer >= k->o->layers ? "but there are fewer" : "twice");
		return -1;
	}
	k->arrive[layer] = rv_now_ns() - k->t0;
	if (!k->arrive[layer])
		k->arrive[layer] = 1;
	k->got++;
	k->done = k->got == k->o->layers;
	if (cm_from_dev(c, p, 2 * k->block))
		return -1;
	for (v = 0; k->check && v < 2; v++) {
		const uint8_t *b = p + v * k->block;
		uint64_t i, bad = 0;

		for (i = 0; i < k->block; i++)
			bad += b[i] != rv_pattern_byte((uint32_t)i, kv_seed(k, layer, v));
		if (bad && !k->wrong)
			printf("# kv_transfer: layer %u %s: %llu bytes wrong\n", layer, v ? "V" : "K",
			       (unsigned long long)bad);
		k->wrong += bad;
	}
	return 0;
}

static int kv_on_recv(struct cm *c, const struct rnic_wc *wc, uint32_t from)
{
	struct kv *k = c->ctx;
	int ret = cm_imm_arrival(c, wc, from, 0, k->active, k->iter, "kv_transfer");

	return ret <= 0 ? ret : kv_layer(c, k, cs_imm_slice(wc->imm_data));
}

static int kv_unstash(struct cm *c, void *ctx, uint32_t from, uint32_t imm)
{
	(void)from;
	return kv_layer(c, ctx, cs_imm_slice(imm));
}

static int kv_round(struct cm *c, struct kv *k, bool check, uint64_t *ns)
{
	uint32_t l;

	k->iter++;
	k->got = 0;
	k->check = check;
	k->done = c->rank != 1;
	memset(k->arrive, 0, sizeof(k->arrive));
	if (check && c->rank == 1)
		memset(k->cache, 0xa5, (uint64_t)k->o->layers * 2 * k->block);
	k->active = true;
	k->t0 = rv_now_ns();
	if (cm_barrier(c))
		return -1;
	if (c->rank == 0) {
		k->t0 = rv_now_ns();
		for (l = 0; l < k->o->layers; l++) {
			uint8_t *p = k->cache + (uint64_t)l * 2 * k->block;

			if (write_imm(c, 1, p, k->block, p, 0, RNIC_WQE_OP_RDMA_WRITE) ||
			    write_imm(c, 1, p + k->block, k->block, p + k->block,
				      cs_imm(k->iter, 0, 0, l), RNIC_WQE_OP_RDMA_WRITE_IMM))
				return -1;
		}
	}
	if (cm_unstash(c, k->iter, k, kv_unstash))
		return -1;
	if (wait_round(c, &k->done, "kv_transfer"))
		return -1;
	*ns = rv_now_ns() - k->t0;
	k->active = false;
	return cm_barrier(c);
}

static int kv_main(struct cm *c, struct kv *k)
{
	const struct opts *o = k->o;
	uint64_t total = 0, ns, bytes = (uint64_t)o->layers * 2 * k->block;
	unsigned long long s0[CM_NSTATS], s1[CM_NSTATS];
	uint32_t l, i;

	c->on_recv = kv_on_recv;
	c->ctx = k;
	if (post_imm_recvs(c))
		return 1;
	if (c->rank == 0)
		for (l = 0; l < o->layers; l++)
			for (i = 0; i < 2; i++)
				rv_pattern_fill(k->cache + ((uint64_t)l * 2 + i) * k->block, k->block,
						kv_seed(k, l, i));
	cm_stats(c, s0);
	for (i = 0; i < o->warmup; i++)
		if (kv_round(c, k, false, &ns))
			return 1;
	for (i = 0; i < o->iters; i++) {
		if (kv_round(c, k, false, &ns))
			return 1;
		total += ns;
	}
	if (o->check && kv_round(c, k, true, &ns))
		return 1;
	cm_stats(c, s1);
	if (cm_finish(c))
		return 1;
	if (c->rank > 1)
		return 0;
	if (o->json) {
		printf("{\"op\":\"kv_transfer\",\"role\":\"%s\",\"rank\":%u,\"layers\":%u,\"heads\":%u,\"head_dim\":%u,\"tokens\":%u,\"bytes\":%llu,\"iterations\":%u,\"time_us\":%.2f,\"gbps\":%.4f,\"wrong\":%llu,\"checked\":%s,\"bytes_host\":%llu,\"bytes_p2p\":%llu,\"retransmits\":%llu,\"path\":\"%s\",\"layer_arrival_us\":[",
		       c->rank ? "decode" : "prefill", c->rank, o->layers, o->heads, o->head_dim,
		       o->tokens, (unsigned long long)bytes, o->iters,
		       o->iters ? total / 1e3 / o->iters : 0,
		       total ? (double)bytes * o->iters / total : 0,
		       (unsigned long long)k->wrong, o->check ? "true" : "false",
		       s1[0] - s0[0], s1[1] - s0[1] + s1[2] - s0[2], s1[3] - s0[3],
		       rv_mr_path_name(c->mr.path));
		for (l = 0; c->rank == 1 && l < o->layers; l++)
			printf("%s%.2f", l ? "," : "", k->arrive[l] / 1e3);
		printf("]}\n");
	} else {
		printf("# rnic-coll kv_transfer: %s (rank %u), %u layers x (K + V) of %u tokens x %u heads x %u dims (fp16): %llu bytes per block, %llu in all\n",
		       c->rank ? "decode" : "prefill", c->rank, o->layers, o->tokens, o->heads,
		       o->head_dim, (unsigned long long)k->block, (unsigned long long)bytes);
		if (c->rank == 1 && o->check) {
			printf("#%6s %14s\n", "layer", "arrival(us)");
			for (l = 0; l < o->layers; l++)
				printf(" %6u %14.1f\n", l, k->arrive[l] / 1e3);
		}
		printf("# time %.1f us per transfer (%u iterations), %.3f GB/s; #wrong %llu; bytes by path: host %llu, p2p %llu; retransmits %llu; GPU memory path %s\n",
		       o->iters ? total / 1e3 / o->iters : 0, o->iters,
		       total ? (double)bytes * o->iters / total : 0, (unsigned long long)k->wrong,
		       s1[0] - s0[0], s1[1] - s0[1] + s1[2] - s0[2], s1[3] - s0[3],
		       rv_mr_path_name(c->mr.path));
	}
	return k->wrong ? 1 : 0;
}

/* ------------------------------------------------------------------------------------ */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rnic-coll all_reduce|reduce_scatter|all_gather|all_to_all [options]\n"
		"       rnic-coll moe [--tokens T] [--hidden H] [--experts E] [options]\n"
		"       rnic-coll kv_transfer [--layers L] [--heads H] [--head-dim D] [--tokens T] [options]\n"
		"Run the same command on every node (one rank per node, the node index is the rank).\n"
		"  -b, --minbytes B    smallest size (K/M/G suffixes; default 1M)\n"
		"  -e, --maxbytes B    largest size (default: -b)\n"
		"  -f, --stepfactor F  multiply the size by F between runs (default 2)\n"
		"  -n, --iters N       timed iterations per size (default 20)\n"
		"  -w, --warmup_iters N  untimed iterations first (default 1)\n"
		"  -c, --check 0|1     check the results against the seeded reference (default 1)\n"
		"      --json          one JSON object per row\n"
		"      --ranks N       number of ranks (default: rnic_coll.ranks=N on the kernel command line)\n"
		"      --id NAME       rendezvous keys coll.NAME.* (default: the command; one per run)\n"
		"      --seed S        input seed (default 1)\n"
		"      --slice B       ring slice size, the unit in flight (default 256K)\n"
		"      --sge N         moe: tokens per SEND (1..%u, default %u)\n"
		"      --strict-p2p    fail instead of using a host bounce buffer\n"
		"      --spin          busy-poll the CQ instead of sleeping on its interrupt\n"
		"      --inject-error  test hook (all_reduce, reduce_scatter, all_gather, all_to_all):\n"
		"                      rank 1 adds 1 to its first input of every checked call\n"
		"      --timeout SEC   give up after this long without progress (default %u; the\n"
		"                      other ranks are awaited up to 600 s at the start)\n"
		"  -d, --dev PATH      RNIC (default " RV_DEFAULT_DEV "); -g, --gpu N: /dev/rnic_gpuN\n"
		"Sizes are bytes of floats (rounded down to whole elements); counts need not divide\n"
		"by the number of ranks. Exit status: 0 ok; 1 error or wrong results; 2 bad usage.\n",
		CM_MAX_SGE, CM_MAX_SGE, COLL_DEFAULT_TIMEOUT_S);
}

static int parse_u32(const char *s, uint64_t lo, uint64_t hi, uint32_t *out)
{
	uint64_t v;

	if (parse_size(s, &v) || v < lo || v > hi)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* rnic_coll.ranks=N on the kernel command line, or 0. */
static uint32_t cmdline_ranks(void)
{
	char buf[4096], *p;
	FILE *f = fopen("/proc/cmdline", "r");
	size_t n;
	unsigned int v = 0;

	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strstr(buf, "rnic_coll.ranks=");
	if (p && sscanf(p + 16, "%u", &v) != 1)
		v = 0;
	return v;
}

static bool id_ok(const char *id)
{
	size_t i;

	for (i = 0; id[i]; i++)
		if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
		      (id[i] >= '0' && id[i] <= '9') || id[i] == '-' || id[i] == '_') ||
		    i >= COLL_MAX_ID)
			return false;
	return i > 0;
}

/* parse_args and the steps of the run: go on (anything else is the exit status). */
#define COLL_RUN	(-1)

/* The command line: the command's options and the settings of struct cm. */
struct args {
	struct opts o;
	const char *dev, *id;
	uint32_t ranks, gpu_n;
	unsigned int timeout_s;
	bool strict, spin;
};

static const struct option coll_longopts[] = {
	{ "minbytes", required_argument, NULL, 'b' },
	{ "maxbytes", required_argument, NULL, 'e' },
	{ "stepfactor", required_argument, NULL, 'f' },
	{ "iters", required_argument, NULL, 'n' },
	{ "warmup_iters", required_argument, NULL, 'w' },
	{ "check", required_argument, NULL, 'c' },
	{ "dev", required_argument, NULL, 'd' },
	{ "gpu", required_argument, NULL, 'g' },
	{ "json", no_argument, NULL, 1000 },
	{ "ranks", required_argument, NULL, 1001 },
	{ "id", required_argument, NULL, 1002 },
	{ "seed", required_argument, NULL, 1003 },
	{ "slice", required_argument, NULL, 1004 },
	{ "strict-p2p", no_argument, NULL, 1005 },
	{ "spin", no_argument, NULL, 1006 },
	{ "timeout", required_argument, NULL, 1007 },
	{ "tokens", required_argument, NULL, 1008 },
	{ "hidden", required_argument, NULL, 1009 },
	{ "experts", required_argument, NULL, 1010 },
	{ "sge", required_argument, NULL, 1011 },
	{ "layers", required_argument, NULL, 1012 },
	{ "heads", required_argument, NULL, 1013 },
	{ "head-dim", required_argument, NULL, 1014 },
	{ "inject-error", no_argument, NULL, 1015 },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* After the options: no operands, the defaults that depend on others, the rank count. */
static int finish_args(struct args *a, int argc, char **argv, bool maxb_given,
		       bool tokens_given)
{
	struct opts *o = &a->o;

	if (optind != argc) {
		fprintf(stderr, "rnic-coll: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (!maxb_given || o->maxb < o->minb)
		o->maxb = o->minb;
	if (!tokens_given)
		o->tokens = o->op == OP_KV ? 512 : 256;
	if (!a->ranks)
		a->ranks = cmdline_ranks();
	if (a->ranks < 2 || a->ranks > CM_MAX_RANKS) {
		fprintf(stderr, "rnic-coll: give the number of ranks: --ranks N (2..%u), or rnic_coll.ranks=N on the kernel command line\n",
			CM_MAX_RANKS);
		return 2;
	}
	if (!o->experts)
		o->experts = 2 * a->ranks;
	return COLL_RUN;
}

/* The command line into *a (zeroed by the caller); COLL_RUN or the exit status. */
static int parse_args(int argc, char **argv, struct args *a)
{
	struct opts *o = &a->o;
	bool maxb_given = false, tokens_given = false;
	uint32_t i;
	int ch;

	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (i = 0; i < sizeof(op_names) / sizeof(op_names[0]); i++)
		if (!strcmp(argv[1], op_names[i]))
			break;
	if (i == sizeof(op_names) / sizeof(op_names[0])) {
		fprintf(stderr, "rnic-coll: unknown command '%s'\n", argv[1]);
		usage(stderr);
		return 2;
	}
	*o = (struct opts){
		.minb = COLL_DEFAULT_BYTES, .factor = 2, .iters = 20, .warmup = 1, .seed = 1,
		.check = true, .slice = COLL_DEFAULT_SLICE, .tokens = 0, .hidden = 1024,
		.experts = 0, .sge = CM_MAX_SGE, .layers = 8, .heads = 8, .head_dim = 64,
	};
	o->op = (enum coll_op)i;
	a->dev = RV_DEFAULT_DEV;
	a->id = op_names[o->op];
	a->timeout_s = COLL_DEFAULT_TIMEOUT_S;

	optind = 2;
	while ((ch = getopt_long(argc, argv, "b:e:f:n:w:c:d:g:h", coll_longopts, NULL)) != -1) {
		uint64_t v;

		switch (ch) {
		case 'b':
		case 'e':
			if (parse_size(optarg, &v) || v < 4 || v > (256ull << 20)) {
				fprintf(stderr, "rnic-coll: bad size '%s' (4..256M)\n", optarg);
				return 2;
			}
			*(ch == 'b' ? &o->minb : &o->maxb) = v;
			maxb_given |= ch == 'e';
			break;
		case 'f':
			if (parse_u32(optarg, 1, 1024, &o->factor))
				goto bad;
			break;
		case 'n':
			if (parse_u32(optarg, 0, 1000000, &o->iters))
				goto bad;
			break;
		case 'w':
			if (parse_u32(optarg, 0, 1000000, &o->warmup))
				goto bad;
			break;
		case 'c':
			if (strcmp(optarg, "0") && strcmp(optarg, "1"))
				goto bad;
			o->check = optarg[0] == '1';
			break;
		case 'd': a->dev = optarg; break;
		case 'g':
			if (parse_u32(optarg, 0, 255, &a->gpu_n))
				goto bad;
			break;
		case 1000: o->json = true; break;
		case 1001:
			if (parse_u32(optarg, 2, CM_MAX_RANKS, &a->ranks))
				goto bad;
			break;
		case 1002:
			if (!id_ok(optarg))
				goto bad;
			a->id = optarg;
			break;
		case 1003:
			if (parse_u32(optarg, 0, 0xffffffffu, &o->seed))
				goto bad;
			break;
		case 1004:
			if (parse_size(optarg, &o->slice) || o->slice < 4 || o->slice > (64u << 20))
				goto bad;
			break;
		case 1005: a->strict = true; break;
		case 1006: a->spin = true; break;
		case 1007:
			if (parse_u32(optarg, 1, 3600, &a->timeout_s))
				goto bad;
			break;
		case 1008:
			if (parse_u32(optarg, 1, 1u << 20, &o->tokens))
				goto bad;
			tokens_given = true;
			break;
		case 1009:
			if (parse_u32(optarg, 1, 1u << 20, &o->hidden))
				goto bad;
			break;
		case 1010:
			if (parse_u32(optarg, 1, 4096, &o->experts))
				goto bad;
			break;
		case 1011:
			if (parse_u32(optarg, 1, CM_MAX_SGE, &o->sge))
				goto bad;
			break;
		case 1012:
			if (parse_u32(optarg, 1, 4096, &o->layers))
				goto bad;
			break;
		case 1013:
			if (parse_u32(optarg, 1, 1024, &o->heads))
				goto bad;
			break;
		case 1014:
			if (parse_u32(optarg, 1, 4096, &o->head_dim))
				goto bad;
			break;
		case 1015: o->inject = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	return finish_args(a, argc, argv, maxb_given, tokens_given);
bad:
	fprintf(stderr, "rnic-coll: bad value '%s'\n", optarg);
	usage(stderr);
	return 2;
}

/* This node's rank (its RNIC's node index, else rnic_emu.node=N) into c->rank. */
static int find_rank(struct cm *c)
{
	int r = rkv_rank();
	struct rnic_query_device q;
	int fd = rv_open(c->dev, &q);

	if (fd < 0)
		return 1;
	close(fd);
	if (q.node != RNIC_NODE_UNKNOWN)
		r = (int)q.node;
	if (r < 0 || (uint32_t)r >= c->n) {
		fprintf(stderr, "rnic-coll: this node's index (%d) is not a rank of %u\n", r, c->n);
		return 2;
	}
	c->rank = (uint32_t)r;
	return COLL_RUN;
}

/* moe: tokens per (source, destination) rank, this rank's inbox, the bytes it needs. */
static int moe_plan(struct cm *c, struct moe *m, const struct opts *o, uint64_t *need)
{
	uint32_t n = c->n, s, t, in = 0, tk;

	m->o = o;
	m->sge = o->sge;
	m->tb = (uint64_t)o->hidden * 4;
	m->cnt = calloc((size_t)n * n, sizeof(*m->cnt));
	m->in_off = calloc(n, sizeof(*m->in_off));
	if (!m->cnt || !m->in_off)
		return 1;
	for (s = 0; s < n; s++)
		for (t = 0; t < o->tokens; t++)
			m->cnt[s * n + moe_dest(c, m, s, t)]++;
	for (s = 0; s < n; s++) {
		m->in_off[s] = in;
		in += m->cnt[s * n + c->rank];
		tk = wqes_for(m->cnt[s * n + c->rank], m->sge) +
		     wqes_for(m->cnt[c->rank * n + s], m->sge);
		if (s != c->rank && tk > CM_DATA_RQ) {
			fprintf(stderr, "rnic-coll: %u RECVs for rank %u exceed the queue (%u): fewer tokens or more --sge\n",
				tk, s, CM_DATA_RQ);
			return 2;
		}
	}
	m->in_total = in;
	*need = 3 * region_bytes(m->tb * (o->tokens > in ? o->tokens : in));
	return COLL_RUN;
}

/* The run: the settings every rank must share, the GPU memory, the command. */
static int coll_run(struct cm *c, const struct opts *o)
{
	static struct kv k;
	struct moe m;
	uint64_t need = 0;
	int ret;

	snprintf(c->cfg, sizeof(c->cfg), "%s:%llu:%llu:%u:%u:%u:%d:%u:%llu:%u:%u:%u:%u:%u:%u:%u",
		 op_names[o->op], (unsigned long long)o->minb, (unsigned long long)o->maxb,
		 o->factor, o->iters, o->warmup, o->check, o->seed, (unsigned long long)o->slice,
		 o->tokens, o->hidden, o->experts, o->sge, o->layers, o->heads, o->head_dim);

	memset(&m, 0, sizeof(m));
	switch (o->op) {
	case OP_MOE:
		ret = moe_plan(c, &m, o, &need);
		if (ret != COLL_RUN)
			return ret;
		break;
	case OP_KV:
		k.o = o;
		k.block = (uint64_t)o->tokens * o->heads * o->head_dim * 2;
		need = region_bytes((uint64_t)o->layers * 2 * k.block);
		break;
	default:
		need = (o->op == OP_REDUCE_SCATTER || o->op == OP_ALL_TO_ALL ? 4 : 3) *
		       region_bytes(o->maxb);
		break;
	}
	if (cm_setup(c, need + 4096))
		return 1;
	switch (o->op) {
	case OP_MOE:
		bufs_init(c, &m.bf, region_bytes(m.tb * (o->tokens > m.in_total ? o->tokens :
							  m.in_total)), false);
		ret = moe_main(c, &m);
		break;
	case OP_KV:
		k.cache = c->mem + ((c->ctl_len + 4095) & ~4095ull);
		ret = kv_main(c, &k);
		break;
	default:
		ret = bw_main(c, o);
		break;
	}
	fflush(stdout);
	return ret;
}

int main(int argc, char **argv)
{
	static struct cm c;
	struct args a;
	int ret;

	memset(&a, 0, sizeof(a));
	ret = parse_args(argc, argv, &a);
	if (ret != COLL_RUN)
		return ret;
	c.dev = a.dev;
	c.id = a.id;
	c.n = a.ranks;
	c.gpu_n = a.gpu_n;
	c.timeout_s = a.timeout_s;
	c.strict = a.strict;
	c.spin = a.spin;
	ret = find_rank(&c);
	if (ret != COLL_RUN)
		return ret;
	return coll_run(&c, &a.o);
}
