/* SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB */
/*
 * rdma-core provider for the rnic-emu RNIC: the provider's objects (docs/ibverbs.md).
 * The kernel side is guest-driver/rnic_ib*.c; the driver-specific command data is
 * rnic_ib_abi.h, the rings' formats and the doorbell page rnic_emu_regs.h, the ring
 * protocol's helpers (slots, owner bit, kick test, wr_id encoding) rnic_emu_ring.h (all
 * three copied here from guest-driver/include/uapi/ by images/build.sh).
 */
#ifndef RNIC_PROVIDER_H
#define RNIC_PROVIDER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <infiniband/driver.h>

#include "rnic_emu_regs.h"
#include "rnic_emu_ring.h"
#include "rnic_ib_abi.h"

struct rnic_device {
	struct verbs_device ibv_dev;
};

struct rnic_qp;

struct rnic_context {
	struct verbs_context ibv_ctx;
	uint32_t max_qp;
	uint32_t max_inline;
	bool atomics;			/* the device does atomics (contract minor 12) */
	bool flush;			/* FLUSH and ATOMIC WRITE (minor 14) */
	pthread_mutex_t qp_table_lock;	/* writers of qp_table */
	struct rnic_qp **qp_table;	/* by QPN: completions name their QP */
};

struct rnic_cq {
	struct verbs_cq vcq;		/* cq and cq_ex (the extended poll API) */
	struct ibv_wc cur;		/* start_poll()/next_poll()'s completion */
	pthread_spinlock_t lock;
	struct rnic_cqe *ring;		/* mmap'd: the device writes CQEs here */
	size_t ring_len;
	void *db_page;			/* mmap'd: this CQ's page of the doorbell page */
	uint32_t cqn;
	uint32_t log_size;
	uint32_t ci;			/* free-running consumer index */
};

/* One work queue: a mmap'd ring, free-running 16-bit indices, the callers' wr_ids. */
struct rnic_wq {
	pthread_spinlock_t lock;	/* posters */
	uint8_t *ring;
	size_t ring_len;
	uint32_t log_size;
	uint32_t log_stride;
	uint16_t pi;			/* next slot to post */
	uint16_t ci;			/* slots before it are free (set by poll_cq) */
	uint64_t *wr_id;
};

struct rnic_qp {
	struct verbs_qp vqp;		/* qp and qp_ex (the extended send API) */
	struct rnic_wq sq, rq;
	void *db_page;			/* mmap'd: this QP's page of the doorbell page */
	uint32_t qpn;
	uint32_t gen;			/* tags the device-visible wr_ids; bumped at RESET */
	uint32_t max_send_sge, max_recv_sge, max_inline;
	bool sq_sig_all;		/* every send WQE is signaled */
	bool ud;			/* a UD QP (minor 16): send WQEs carry an address vector */
	/* ibv_wr_start() .. ibv_wr_complete(), under sq.lock */
	uint16_t wr_start;		/* sq.pi at ibv_wr_start() */
	int wr_err;			/* first error of the batch */
	struct rnic_wqe *wr_cur;	/* the WQE the setters fill */
};

/*
 * A shared receive queue (minor 15, rnic_srq.c): its ring, its page of the doorbell page,
 * and the WQEs outstanding by tag (their completions come in any order).
 */
struct rnic_srq {
	struct verbs_srq vsrq;
	pthread_spinlock_t lock;	/* posters and the pollers of its QPs' CQs */
	uint8_t *ring;
	size_t ring_len;
	void *db_page;
	uint32_t srqn, gen, max_sge;
	uint32_t log_size, log_stride;
	uint16_t pi;			/* next ring position to write */
	uint16_t ci;			/* positions before it the device has taken */
	uint32_t nfree;			/* free tags, on the free_tags stack */
	uint16_t *free_tags;
	struct {
		uint64_t wr_id;		/* the caller's */
		uint16_t pos;		/* the ring position written */
		bool busy;
	} *tags;
};

/* An address handle (minor 16): the vector the kernel resolved, copied into each UD WQE. */
struct rnic_ah {
	struct ibv_ah ibv_ah;
	struct rnic_ud_av av;
};

static inline struct rnic_ah *to_rah(struct ibv_ah *ibah)
{
	return container_of(ibah, struct rnic_ah, ibv_ah);
}

static inline struct rnic_context *to_rctx(struct ibv_context *ibctx)
{
	return container_of(ibctx, struct rnic_context, ibv_ctx.context);
}

static inline struct rnic_cq *to_rcq(struct ibv_cq *ibcq)
{
	return container_of(ibcq, struct rnic_cq, vcq.cq);
}

static inline struct rnic_qp *to_rqp(struct ibv_qp *ibqp)
{
	return container_of(ibqp, struct rnic_qp, vqp.qp);
}

static inline struct rnic_srq *to_rsrq(struct ibv_srq *ibsrq)
{
	return container_of(ibsrq, struct rnic_srq, vsrq.srq);
}

/* rnic.c: mappings of the uverbs file */
void *rnic_map(struct ibv_context *ibctx, size_t len, uint64_t key);
void rnic_unmap(void *p, size_t len);

/* rnic_dp.c: the data path (no system call unless the device sleeps) */
int rnic_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int rnic_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int rnic_poll_cq(struct ibv_cq *ibcq, int ne, struct ibv_wc *wc);
int rnic_req_notify_cq(struct ibv_cq *ibcq, int solicited_only);
void rnic_cq_ex_init(struct rnic_cq *cq, uint64_t wc_flags);
int rnic_qp_ex_init(struct rnic_qp *qp, uint64_t send_ops_flags, bool atomics, bool flush,
		    enum ibv_qp_type type);
bool rnic_dp_publish(void *db_page, bool recv, uint16_t old, uint16_t new);
int rnic_kick_recv(struct ibv_context *ctx, uint32_t handle, bool srq);
void rnic_write_recv_wqe(uint8_t *w, const struct ibv_recv_wr *wr, uint64_t wr_id);

/* rnic_srq.c: shared receive queues */
struct ibv_srq *rnic_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr);
int rnic_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int attr_mask);
int rnic_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr);
int rnic_destroy_srq(struct ibv_srq *ibsrq);
int rnic_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
		       struct ibv_recv_wr **bad_wr);
bool rnic_srq_complete(struct rnic_srq *srq, uint64_t wr_id, uint64_t *out);

#endif /* RNIC_PROVIDER_H */
