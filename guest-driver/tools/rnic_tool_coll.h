/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The communicator of rnic-coll: one rank per node, a full mesh of RC QP pairs (a data QP
 * and a control QP to every other rank) on one RNIC, one CQ, and one GPU memory region
 * that holds every buffer (data, landing scratch, control slots), so that with P2P no
 * payload byte touches host memory. Ranks meet through the host rendezvous store
 * (rnic_tool_kv.h): each publishes coll.<id>.<rank> with its address, rkey and, per peer,
 * the QP numbers and PSNs, then connects to everyone else's.
 *
 * Control messages (a barrier, per-size reports to rank 0) are small SENDs between the
 * control QPs. Every MR access goes through cm_to_dev/cm_from_dev, which are MR_SYNC for a
 * bounce-buffer MR (Linux refused P2P) and nothing otherwise.
 * Header-only, like the other tool helpers; used by rnic-coll.c only.
 */
#ifndef RNIC_TOOL_COLL_H
#define RNIC_TOOL_COLL_H

#include <stdbool.h>
#include <stdlib.h>
#include <sys/random.h>

#include "rnic_tool_coll_sched.h"
#include "rnic_tool_kv.h"
#include "rnic_tool_verbs.h"

#define CM_DATA_SQ	128		/* data QP send queue */
#define CM_DATA_RQ	128		/* data QP receive queue */
#define CM_CTL_Q	32		/* control QP send and receive queues */
#define CM_CTL_SLOT	128		/* bytes per control message slot */
#define CM_MAX_SGE	RNIC_UAPI_MAX_SGE
#define CM_STASH	65536		/* early WRITE_IMM arrivals kept for the next round */
#define CM_MSG_MAGIC	0x434f4c4cu	/* "COLL" */
#define CM_NSTATS	4
/* Ranks: the record (a QP pair per rank) must fit the store's 1024-byte values. */
#define CM_MAX_RANKS	16

enum { CM_MSG_BARRIER = 1, CM_MSG_REPORT = 2 };

struct cm_msg {
	uint32_t magic, type, gen, from;
	uint64_t v[12];
};

struct cm_peer {
	uint32_t ip, node, rkey, path;
	uint64_t addr;
	uint32_t dqpn, dpsn, cqpn, cpsn;	/* the peer's QPs (and their send PSNs) towards us */
};

struct cm {
	/* configuration */
	const char *dev, *id;
	uint32_t rank, n, gpu_n;
	unsigned int timeout_s;
	bool strict, spin;
	char cfg[160];			/* options that must match on every rank */

	int fd;
	struct rnic_query_device q;
	struct rv_gpu gpu;
	uint32_t pd, cq;
	uint8_t *mem;			/* the GPU memory region: [control | the command's buffers] */
	uint64_t mem_len, mem_bar;	/* bytes; BAR1 offset of mem */
	uint64_t ctl_len;		/* bytes of control slots at the start of mem */
	struct rv_mr mr;
	uint32_t dqp[CM_MAX_RANKS], cqp[CM_MAX_RANKS];
	uint32_t dpsn[CM_MAX_RANKS], cpsn[CM_MAX_RANKS];
	struct cm_peer peer[CM_MAX_RANKS];
	uint32_t qp_rank[1024];		/* QPN -> peer rank (QPNs are < MAX_QP) */
	bool qp_data[1024];

	/* control */
	uint32_t bgen, barrier_got[4];
	uint64_t ctl_sent[CM_MAX_RANKS], ctl_done;
	struct cm_msg report[CM_MAX_RANKS];
	uint32_t report_got;

	/* data completions for the current round */
	uint64_t data_posted, data_done;
	uint32_t stash[CM_STASH];
	uint32_t stash_rank[CM_STASH];
	uint32_t nstash;
	/* the command's handler of data receives (NULL: WRITE_WITH_IMM arrivals are stashed) */
	int (*on_recv)(struct cm *c, const struct rnic_wc *wc, uint32_t from);
	void *ctx;

	char stats_path[160];
};

static inline uint64_t cm_bar(const struct cm *c, const void *p)
{
	return c->mem_bar + (uint64_t)((const uint8_t *)p - c->mem);
}

static inline int cm_sync(struct cm *c, const void *p, uint64_t len, uint32_t dir)
{
	if (c->mr.path != RNIC_MR_PATH_BOUNCE || !len)
		return 0;
	return rv_mr_sync(c->fd, &c->mr, (uint64_t)((const uint8_t *)p - c->mem), len, dir);
}

/* Before the RNIC reads [p, p+len) that the CPU or the GPU engine wrote. */
static inline int cm_to_dev(struct cm *c, const void *p, uint64_t len)
{
	return cm_sync(c, p, len, RNIC_MR_SYNC_TO_BOUNCE);
}

/* After the RNIC wrote [p, p+len), before the CPU or the GPU engine reads it. */
static inline int cm_from_dev(struct cm *c, const void *p, uint64_t len)
{
	return cm_sync(c, p, len, RNIC_MR_SYNC_FROM_BOUNCE);
}

/* The GPU engine on BAR1 offsets of mem; 0 or -1 (printed). */
static inline int cm_gpu(struct cm *c, uint32_t op, const void *src, const void *src2,
			 void *dst, uint64_t len)
{
	struct rnic_gpu_launch l = {
		.op = op, .src = src ? cm_bar(c, src) : 0, .src2 = src2 ? cm_bar(c, src2) : 0,
		.dst = cm_bar(c, dst), .len = len,
	};

	if (!len)
		return 0;
	if (ioctl(c->gpu.fd, RNIC_GPU_IOCTL_LAUNCH, &l) == 0)
		return 0;
	printf("error: GPU_LAUNCH op %u len %llu: %s (engine result %u)\n", op,
	       (unsigned long long)len, strerror(errno), l.result);
	return -1;
}

static inline void cm_stats(struct cm *c, unsigned long long *v)
{
	static const char *const names[CM_NSTATS] = {
		"dma_host_bytes", "dma_p2p_switch_bytes", "dma_p2p_root_complex_bytes",
		"retransmits",
	};
	int i;

	for (i = 0; i < CM_NSTATS; i++)
		if (rv_read_stat(c->stats_path, names[i], &v[i]))
			v[i] = 0;
}

static inline uint32_t cm_random_psn(void)
{
	uint32_t v;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (uint32_t)(rv_now_ns() ^ ((uint64_t)getpid() << 20));
	return v & RNIC_PSN_MASK;
}

static inline struct cm_msg *cm_ctl_recv_slot(struct cm *c, uint32_t peer, uint32_t i)
{
	return (struct cm_msg *)(c->mem + ((uint64_t)peer * 2 * CM_CTL_Q + i) * CM_CTL_SLOT);
}

static inline struct cm_msg *cm_ctl_send_slot(struct cm *c, uint32_t peer, uint32_t i)
{
	return (struct cm_msg *)(c->mem + ((uint64_t)peer * 2 * CM_CTL_Q + CM_CTL_Q + i) *
				 CM_CTL_SLOT);
}

static inline int cm_post_ctl_recv(struct cm *c, uint32_t peer, uint32_t i)
{
	struct rnic_recv_wr r;

	memset(&r, 0, sizeof(r));
	r.wr_id = (uint64_t)i;
	r.num_sge = 1;
	r.sge[0].addr = (uintptr_t)cm_ctl_recv_slot(c, peer, i);
	r.sge[0].length = CM_CTL_SLOT;
	r.sge[0].lkey = c->mr.lkey;
	return rv_post_recv(c->fd, c->cqp[peer], &r, 1);
}

/* A data RECV without buffers: what a WRITE_WITH_IMM consumes. */
static inline int cm_post_imm_recv(struct cm *c, uint32_t peer)
{
	struct rnic_recv_wr r;

	memset(&r, 0, sizeof(r));
	return rv_post_recv(c->fd, c->dqp[peer], &r, 1);
}

/* ---- the record in the rendezvous store ---- */

static inline void cm_key(const struct cm *c, uint32_t rank, char *key)
{
	snprintf(key, RKV_MAX_KEY + 1, "coll.%s.%u", c->id, rank);
}

static inline void cm_record(const struct cm *c, char *buf, size_t len)
{
	char ip[16];
	size_t at;
	uint32_t p;

	at = (size_t)snprintf(buf, len, "v=1,n=%u,ip=%s,addr=0x%llx,rkey=0x%x,path=%u,cfg=%s,q=",
			      c->n, rv_ipv4_str(c->q.ipv4, ip),
			      (unsigned long long)(uintptr_t)c->mem, c->mr.rkey, c->mr.path,
			      c->cfg);
	for (p = 0; p < c->n && at < len; p++)
		at += (size_t)snprintf(buf + at, len - at, "%u:%u:%u:%u/", c->dqp[p], c->dpsn[p],
				       c->cqp[p], c->cpsn[p]);
}

/* Parses rank `from`'s record; 0 or -1 (printed). */
static inline int cm_parse(struct cm *c, uint32_t from, char *val, const char *key)
{
	struct cm_peer *pp = &c->peer[from];
	char *tok, *save = NULL, *v, *q = NULL, *cfg = NULL;
	unsigned long long x;
	unsigned int seen = 0, n = 0, p;

	for (tok = strtok_r(val, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		v = strchr(tok, '=');
		if (!v)
			goto bad;
		*v++ = '\0';
		if (!strcmp(tok, "ip")) {
			if (rv_parse_ipv4(v, &pp->ip))
				goto bad;
			seen |= 1;
		} else if (!strcmp(tok, "q")) {
			q = v;
		} else if (!strcmp(tok, "cfg")) {
			cfg = v;
		} else {
			errno = 0;
			x = strtoull(v, &v, 0);
			if (errno || *v)
				goto bad;
			if (!strcmp(tok, "n")) { n = (unsigned int)x; seen |= 2; }
			else if (!strcmp(tok, "addr")) { pp->addr = x; seen |= 4; }
			else if (!strcmp(tok, "rkey")) { pp->rkey = (uint32_t)x; seen |= 8; }
			else if (!strcmp(tok, "path")) pp->path = (uint32_t)x;
			else if (!strcmp(tok, "v") && x != 1) goto bad;
		}
	}
	if (seen != 15 || !q || !cfg)
		goto bad;
	if (n != c->n || strcmp(cfg, c->cfg)) {
		printf("error: %s: rank %u runs with %u ranks and options '%s', this rank with %u and '%s': run every rank with the same command\n",
		       key, from, n, cfg, c->n, c->cfg);
		return -1;
	}
	for (p = 0; p <= c->rank; p++) {
		unsigned int a, b, d, e;
		int used = 0;

		if (sscanf(q, "%u:%u:%u:%u/%n", &a, &b, &d, &e, &used) != 4 || !used)
			goto bad;
		q += used;
		if (p == c->rank) {
			pp->dqpn = a;
			pp->dpsn = b & RNIC_PSN_MASK;
			pp->cqpn = d;
			pp->cpsn = e & RNIC_PSN_MASK;
		}
	}
	return 0;
bad:
	printf("error: %s: malformed record from the rendezvous store\n", key);
	return -1;
}

static inline int cm_create_qp(struct cm *c, uint32_t sq, uint32_t rq, uint32_t sge,
			       uint32_t *qpn)
{
	struct rnic_create_qp q;

	memset(&q, 0, sizeof(q));
	q.pd = c->pd;
	q.send_cqn = q.recv_cqn = c->cq;
	q.max_send_wr = sq;
	q.max_recv_wr = rq;
	q.max_send_sge = sge;
	q.max_recv_sge = sge;
	if (rv_create_qp(c->fd, &q))
		return -1;
	*qpn = q.qpn;
	if (q.qpn >= 1024) {
		printf("error: QP number %u out of range\n", q.qpn);
		return -1;
	}
	return rv_modify_qp(c->fd, q.qpn, RNIC_QPS_INIT, RNIC_QP_ATTR_ACCESS, 0,
			    RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ, 0, 0);
}

static inline int cm_connect(struct cm *c, uint32_t qpn, uint32_t my_psn, uint32_t ip,
			     uint32_t dest, uint32_t dest_psn)
{
	/*
	 * timeout 16: 4.096 us * 2^16 = 268 ms per retransmission, 2.1 s for all seven
	 * retries. Four guests and their node servers can share two host cores; with
	 * 67 ms (14) a node server kept off the CPU for half a second would exhaust a QP's
	 * retries (a rare, unexplained retry exhaustion under 1% injected loss is the one
	 * failure of this kind seen). NCCL's own default (NCCL_IB_TIMEOUT) is longer still.
	 */
	struct rv_remote_attr ra = {
		.dest_qpn = dest, .dest_ip = ip, .rq_psn = dest_psn, .sq_psn = my_psn,
		.path_mtu = 4096, .retry_cnt = 7, .timeout = 16, .rnr_retry = 7,
		.rnr_timer_us = 10,
	};

	return rv_connect_qp_remote(c->fd, qpn, &ra);
}

/*
 * Opens the RNIC and GPU, allocates mem_len bytes of GPU memory after the control slots,
 * registers it, builds the mesh and meets every other rank. On success c->mem + c->ctl_len
 * is the command's memory. 0 or -1 (printed).
 */
static inline int cm_setup(struct cm *c, uint64_t data_len)
{
	uint32_t access = RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE |
			  RNIC_ACCESS_REMOTE_READ;
	char key[RKV_MAX_KEY + 1], val[RKV_MAX_VALUE + 1];
	uint32_t p, i, entries;
	uint64_t last;

	c->fd = rv_open(c->dev, &c->q);
	if (c->fd < 0)
		return -1;
	if (!c->q.ipv4) {
		printf("error: %s has no fabric address: rnic-coll needs a multi-node topology\n",
		       c->dev);
		return -1;
	}
	rv_dev_sysfs(c->dev, c->stats_path, sizeof(c->stats_path) - 8);
	strcat(c->stats_path, "/stats");
	if (rv_gpu_open(c->gpu_n, &c->gpu))
		return -1;

	c->ctl_len = (uint64_t)c->n * 2 * CM_CTL_Q * CM_CTL_SLOT;
	c->mem_len = (c->ctl_len + data_len + 4095) & ~4095ull;
	if (c->mem_len > c->q.max_mr_size || c->mem_len > c->gpu.q.bar1_size) {
		printf("error: %llu bytes of GPU memory needed; the GPU has %llu, an MR at most %llu\n",
		       (unsigned long long)c->mem_len, (unsigned long long)c->gpu.q.bar1_size,
		       (unsigned long long)c->q.max_mr_size);
		return -1;
	}
	c->mem = rv_gpu_alloc(&c->gpu, c->mem_len);
	if (!c->mem || rv_gpu_offset(&c->gpu, c->mem, &c->mem_bar) ||
	    rv_gpu_offset(&c->gpu, c->mem + c->mem_len - 4096, &last))
		return -1;
	if (last != c->mem_bar + c->mem_len - 4096) {
		printf("error: the GPU memory mapping is not contiguous in BAR1\n");
		return -1;
	}
	memset(c->mem, 0, c->ctl_len);

	entries = (c->n - 1) * (CM_DATA_SQ + CM_DATA_RQ + 2 * CM_CTL_Q);
	if (entries > 1u << c->q.max_ring_log2)
		entries = 1u << c->q.max_ring_log2;
	if (rv_alloc_pd(c->fd, &c->pd) || rv_create_cq(c->fd, entries, &c->cq) ||
	    rv_reg_mr_flags(c->fd, c->pd, c->mem, c->mem_len, access,
			    c->strict ? RNIC_MR_FLAG_STRICT_P2P : 0, &c->mr))
		return -1;
	if (cm_to_dev(c, c->mem, c->ctl_len))
		return -1;
	for (p = 0; p < c->n; p++) {
		if (p == c->rank)
			continue;
		if (cm_create_qp(c, CM_DATA_SQ, CM_DATA_RQ, CM_MAX_SGE, &c->dqp[p]) ||
		    cm_create_qp(c, CM_CTL_Q, CM_CTL_Q, 1, &c->cqp[p]))
			return -1;
		c->qp_rank[c->dqp[p]] = p;
		c->qp_data[c->dqp[p]] = true;
		c->qp_rank[c->cqp[p]] = p;
		c->dpsn[p] = cm_random_psn();
		c->cpsn[p] = cm_random_psn();
		for (i = 0; i < CM_CTL_Q; i++)
			if (cm_post_ctl_recv(c, p, i))
				return -1;
	}

	cm_key(c, c->rank, key);
	cm_record(c, val, sizeof(val));
	if (strlen(val) + 1 >= sizeof(val)) {
		printf("error: the record of %u ranks does not fit the rendezvous store\n", c->n);
		return -1;
	}
	if (rkv_put(key, val))
		return -1;
	for (p = 0; p < c->n; p++) {
		int ret;

		if (p == c->rank)
			continue;
		cm_key(c, p, key);
		ret = rkv_get(key, RKV_MAX_TIMEOUT_MS, val, sizeof(val));
		if (ret == RKV_TIMEOUT)
			printf("error: no %s in the rendezvous store within %u s (is rank %u running rnic-coll with --id %s?)\n",
			       key, RKV_MAX_TIMEOUT_MS / 1000, p, c->id);
		if (ret || cm_parse(c, p, val, key))
			return -1;
		if (cm_connect(c, c->dqp[p], c->dpsn[p], c->peer[p].ip, c->peer[p].dqpn,
			       c->peer[p].dpsn) ||
		    cm_connect(c, c->cqp[p], c->cpsn[p], c->peer[p].ip, c->peer[p].cqpn,
			       c->peer[p].cpsn))
			return -1;
	}
	/* Nobody sends before every QP of the mesh is ready to receive (else retries run out). */
	snprintf(key, sizeof(key), "coll.%s.%u.up", c->id, c->rank);
	if (rkv_put(key, "1"))
		return -1;
	for (p = 0; p < c->n; p++) {
		int ret;

		if (p == c->rank)
			continue;
		snprintf(key, sizeof(key), "coll.%s.%u.up", c->id, p);
		ret = rkv_get(key, RKV_MAX_TIMEOUT_MS, val, sizeof(val));
		if (ret == RKV_TIMEOUT)
			printf("error: rank %u did not connect within %u s\n", p, RKV_MAX_TIMEOUT_MS / 1000);
		if (ret)
			return -1;
	}
	return 0;
}

/* One data RECV consumed by a WRITE_WITH_IMM: keep it for the caller's round. */
static inline int cm_stash(struct cm *c, uint32_t from, uint32_t imm)
{
	if (c->nstash >= CM_STASH) {
		printf("error: more than %u early arrivals\n", CM_STASH);
		return -1;
	}
	c->stash[c->nstash] = imm;
	c->stash_rank[c->nstash++] = from;
	return 0;
}

/*
 * A data receive in a command built on WRITE_WITH_IMM: checks it is one (from rank
 * want_from, unless negative), reposts the RECV it consumed and stashes it unless it
 * belongs to the round in progress. 1: the caller handles it now; 0: stashed; -1: error.
 */
static inline int cm_imm_arrival(struct cm *c, const struct rnic_wc *wc, uint32_t from,
				 int want_from, bool active, uint32_t iter, const char *what)
{
	if (wc->opcode != RNIC_CQE_OP_RECV_RDMA_IMM ||
	    (want_from >= 0 && from != (uint32_t)want_from)) {
		printf("error: %s: unexpected %s from rank %u\n", what, rv_cqe_op_name(wc->opcode),
		       from);
		return -1;
	}
	if (cm_post_imm_recv(c, from))
		return -1;
	if (!active || cs_imm_iter(wc->imm_data) != (iter & 0xf))
		return cm_stash(c, from, wc->imm_data);
	return 1;
}

/*
 * Hands every stashed arrival of iteration `iter` (its 4-bit tag) to fn and forgets it;
 * arrivals of other iterations stay. 0, or fn's -1.
 */
static inline int cm_unstash(struct cm *c, uint32_t iter, void *ctx,
			     int (*fn)(struct cm *c, void *ctx, uint32_t from, uint32_t imm))
{
	uint32_t i = 0, imm, from;

	while (i < c->nstash) {
		imm = c->stash[i];
		from = c->stash_rank[i];
		if (cs_imm_iter(imm) != (iter & 0xf)) {
			i++;
			continue;
		}
		c->stash[i] = c->stash[--c->nstash];
		c->stash_rank[i] = c->stash_rank[c->nstash];
		if (fn(c, ctx, from, imm))
			return -1;
	}
	return 0;
}

static inline int cm_ctl_msg(struct cm *c, uint32_t from, const struct rnic_wc *wc)
{
	struct cm_msg *m = cm_ctl_recv_slot(c, from, (uint32_t)wc->wr_id);
	struct cm_msg copy;

	if (cm_from_dev(c, m, sizeof(*m)))
		return -1;
	memcpy(&copy, m, sizeof(copy));
	if (wc->byte_len != sizeof(copy) || copy.magic != CM_MSG_MAGIC || copy.from != from) {
		printf("error: malformed control message from rank %u (%u bytes)\n", from,
		       wc->byte_len);
		return -1;
	}
	if (copy.type == CM_MSG_BARRIER) {
		if (copy.gen != c->bgen && copy.gen != c->bgen + 1) {
			printf("error: rank %u is at barrier %u, this rank at %u\n", from, copy.gen,
			       c->bgen);
			return -1;
		}
		c->barrier_got[copy.gen & 3]++;
	} else if (copy.type == CM_MSG_REPORT && c->rank == 0) {
		c->report[from] = copy;
		c->report_got++;
	} else {
		printf("error: unexpected control message type %u from rank %u\n", copy.type, from);
		return -1;
	}
	return cm_post_ctl_recv(c, from, (uint32_t)wc->wr_id);
}

/*
 * Polls the CQ once (sleeping up to a few ms when asked and nothing is there) and
 * dispatches: control traffic is handled here, data send completions counted, data
 * receives handed to c->on_recv (none: stashed). Returns the number of completions, or -1.
 */
static inline int cm_poll(struct cm *c, bool wait)
{
	struct rnic_wc wcs[64];
	int n = rv_poll_cq(c->fd, c->cq, wcs, 64, wait && !c->spin ? 5 : 0), i;

	for (i = 0; i < n; i++) {
		const struct rnic_wc *wc = &wcs[i];
		uint32_t qpn = wc->qpn < 1024 ? wc->qpn : 0, from = c->qp_rank[qpn];

		if (wc->status != RNIC_WC_SUCCESS) {
			printf("error: completion on QP %u (rank %u, %s): status %s syndrome %s opcode %s\n",
			       wc->qpn, from, c->qp_data[qpn] ? "data" : "control",
			       rv_wc_status_name(wc->status), rv_qp_err_name(wc->syndrome),
			       rv_cqe_op_name(wc->opcode));
			return -1;
		}
		if (!c->qp_data[qpn]) {
			if (wc->opcode == RNIC_CQE_OP_RECV) {
				if (cm_ctl_msg(c, from, wc))
					return -1;
			} else {
				c->ctl_done++;
			}
			continue;
		}
		if (wc->opcode == RNIC_CQE_OP_RDMA_WRITE || wc->opcode == RNIC_CQE_OP_SEND ||
		    wc->opcode == RNIC_CQE_OP_RDMA_READ) {
			c->data_done++;
			continue;
		}
		if (c->on_recv) {
			if (c->on_recv(c, wc, from))
				return -1;
		} else if (wc->opcode == RNIC_CQE_OP_RECV_RDMA_IMM) {
			if (cm_stash(c, from, wc->imm_data) || cm_post_imm_recv(c, from))
				return -1;
		} else {
			printf("error: unexpected %s from rank %u outside a round\n",
			       rv_cqe_op_name(wc->opcode), from);
			return -1;
		}
	}
	return n;
}

/* Stall guard: -1 (printed) when nothing completed for the timeout. */
static inline int cm_stalled(struct cm *c, uint64_t *last, int got, const char *what)
{
	uint64_t now = rv_now_ns();

	if (got > 0) {
		*last = now;
		return 0;
	}
	if (now - *last < (uint64_t)c->timeout_s * 1000000000ull)
		return 0;
	printf("error: rank %u: no progress for %u s in %s\n", c->rank, c->timeout_s, what);
	return -1;
}

static inline int cm_send_ctl(struct cm *c, uint32_t to, const struct cm_msg *m)
{
	uint32_t slot = (uint32_t)(c->ctl_sent[to] % CM_CTL_Q);
	struct cm_msg *s = cm_ctl_send_slot(c, to, slot);
	struct rnic_send_wr wr;
	uint64_t sent = 0, last = rv_now_ns();
	uint32_t p;

	/* A slot is free again once every send before it completed (one CQ, in order per QP). */
	for (p = 0; p < c->n; p++)
		sent += c->ctl_sent[p];
	while (sent - c->ctl_done >= CM_CTL_Q) {
		int got = cm_poll(c, true);

		if (got < 0 || cm_stalled(c, &last, got, "a control send"))
			return -1;
	}
	memcpy(s, m, sizeof(*m));
	if (cm_to_dev(c, s, sizeof(*s)))
		return -1;
	memset(&wr, 0, sizeof(wr));
	wr.opcode = RNIC_WQE_OP_SEND;
	wr.flags = RNIC_WQE_FLAG_SIGNALED;
	wr.num_sge = 1;
	wr.sge[0].addr = (uintptr_t)s;
	wr.sge[0].length = sizeof(*s);
	wr.sge[0].lkey = c->mr.lkey;
	if (rv_post_send(c->fd, c->cqp[to], &wr, 1))
		return -1;
	c->ctl_sent[to]++;
	return 0;
}

/* Every rank reaches it before any leaves it. Data arrivals meanwhile are stashed. */
static inline int cm_barrier(struct cm *c)
{
	struct cm_msg m = { .magic = CM_MSG_MAGIC, .type = CM_MSG_BARRIER, .from = c->rank };
	uint64_t last = rv_now_ns(), sent = 0;
	uint32_t p;

	m.gen = ++c->bgen;
	for (p = 0; p < c->n; p++)
		if (p != c->rank && cm_send_ctl(c, p, &m))
			return -1;
	for (p = 0; p < c->n; p++)
		sent += c->ctl_sent[p];
	while (c->barrier_got[m.gen & 3] < c->n - 1 || c->ctl_done < sent) {
		int got = cm_poll(c, true);

		if (got < 0 || cm_stalled(c, &last, got, "a barrier"))
			return -1;
	}
	c->barrier_got[m.gen & 3] = 0;
	return 0;
}

/* Rank r > 0: send v[] to rank 0. Rank 0: wait for every other rank's report. */
static inline int cm_gather(struct cm *c, const uint64_t *v, unsigned int nv)
{
	struct cm_msg m = { .magic = CM_MSG_MAGIC, .type = CM_MSG_REPORT, .from = c->rank };
	uint64_t last = rv_now_ns();

	if (c->rank) {
		memcpy(m.v, v, nv * sizeof(*v));
		return cm_send_ctl(c, 0, &m);
	}
	memcpy(c->report[0].v, v, nv * sizeof(*v));
	while (c->report_got < c->n - 1) {
		int got = cm_poll(c, true);

		if (got < 0 || cm_stalled(c, &last, got, "gathering reports"))
			return -1;
	}
	c->report_got = 0;
	return 0;
}

/* Waits until every data send posted so far has completed. */
static inline int cm_drain_sends(struct cm *c)
{
	uint64_t last = rv_now_ns();

	while (c->data_done < c->data_posted) {
		int got = cm_poll(c, true);

		if (got < 0 || cm_stalled(c, &last, got, "data sends"))
			return -1;
	}
	return 0;
}

/* Posts one data WR to peer `to`, polling while its send queue is full. */
static inline int cm_post_data(struct cm *c, uint32_t to, struct rnic_send_wr *wr)
{
	uint64_t last = rv_now_ns();

	/* Completions arrive in order per QP, and one CQ carries them all: bound the total. */
	while (c->data_posted - c->data_done >= CM_DATA_SQ) {
		int got = cm_poll(c, true);

		if (got < 0 || cm_stalled(c, &last, got, "a full send queue"))
			return -1;
	}
	wr->flags |= RNIC_WQE_FLAG_SIGNALED;
	if (rv_post_send(c->fd, c->dqp[to], wr, 1))
		return -1;
	c->data_posted++;
	return 0;
}

/* The end of a run: everyone done, then a pause so the last ACKs can still be answered. */
static inline int cm_finish(struct cm *c)
{
	int ret = cm_barrier(c);

	usleep(500000);
	return ret;
}

#endif /* RNIC_TOOL_COLL_H */
