// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * rdma-core provider for rnic-emu: the data path, in user space (docs/ibverbs.md).
 *
 * post_send/post_recv write WQEs (struct rnic_wqe, docs/verbs.md §3) into the QP's mmap'd
 * ring, store the producer index into the QP's page of the doorbell page, and ring the MMIO
 * doorbell (through the kernel: an empty POST_SEND/POST_RECV command) only when the
 * device's event index says it sleeps (docs/verbs.md §3.1). poll_cq reads CQEs from the
 * mmap'd ring with the owner rule (§5) and stores the consumer index into the CQ's page;
 * so do start_poll/next_poll/end_poll, the extended poll API of ibv_create_cq_ex().
 * In steady state nothing here makes a system call.
 *
 * Both send APIs: ibv_post_send() and the extended one (ibv_wr_start() .. ibv_wr_complete(),
 * which perftest uses by default). Atomics on a device of contract minor 12 and later;
 * IBTA 1.5 FLUSH and ATOMIC WRITE (minor 14) through the extended API only (ibv_wr_flush(),
 * ibv_wr_atomic_write(): struct ibv_send_wr has no field for them). Not supported: memory
 * windows, UD (no AH), SEND_WITH_INV, TSO; bad requests fail with EINVAL (and *bad_wr),
 * nothing of them published.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include <util/udma_barrier.h>

#include "rnic.h"

static uint16_t load16(const uint16_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void store16(uint16_t *p, uint16_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/*
 * POST_RECV (@srq false) or POST_SRQ_RECV with no work requests for the object @handle:
 * the kernel rings the MMIO RQ doorbell. Written on the command fd: the two commands have
 * the same layout, and libibverbs' own ibv_cmd_post_srq_recv() goes through the ioctl
 * path, which refuses such write commands (EOPNOTSUPP).
 */
int rnic_kick_recv(struct ibv_context *ctx, uint32_t handle, bool srq)
{
	struct ib_uverbs_post_recv_resp resp;
	struct ibv_post_recv cmd = {};

	cmd.hdr.command = srq ? IB_USER_VERBS_CMD_POST_SRQ_RECV : IB_USER_VERBS_CMD_POST_RECV;
	cmd.hdr.in_words = sizeof(cmd) / 4;
	cmd.hdr.out_words = sizeof(resp) / 4;
	cmd.response = (uintptr_t)&resp;
	cmd.qp_handle = handle;
	cmd.wqe_size = sizeof(struct ibv_recv_wr);
	if (write(ctx->cmd_fd, &cmd, sizeof(cmd)) != sizeof(cmd))
		return errno;
	return 0;
}

/* Asks the kernel to ring the MMIO doorbell with the index the doorbell page holds. */
static int rnic_kick(struct rnic_qp *qp, bool recv)
{
	struct ib_uverbs_post_send_resp resp;
	struct ibv_post_send cmd = {};

	if (recv)
		return rnic_kick_recv(qp->vqp.qp.context, qp->vqp.qp.handle, false);
	cmd.hdr.command = IB_USER_VERBS_CMD_POST_SEND;
	cmd.hdr.in_words = sizeof(cmd) / 4;
	cmd.hdr.out_words = sizeof(resp) / 4;
	cmd.response = (uintptr_t)&resp;
	cmd.qp_handle = qp->vqp.qp.handle;
	cmd.wqe_size = sizeof(struct ibv_send_wr);
	if (write(qp->vqp.qp.context->cmd_fd, &cmd, sizeof(cmd)) != sizeof(cmd))
		return errno;
	return 0;
}

/*
 * Publishes WQEs old..new in a doorbell page (docs/verbs.md §3.1, the driver's side of
 * the handshake): true when the device's event index asks for the MMIO doorbell.
 */
bool rnic_dp_publish(void *db_page, bool recv, uint16_t old, uint16_t new)
{
	volatile uint32_t *page = db_page;
	uint16_t event;

	udma_to_device_barrier();	/* the WQEs before the index */
	page[rnic_dbp_pi(recv) / 4] = new;
	atomic_thread_fence(memory_order_seq_cst);	/* the store before the event load */
	event = page[rnic_dbp_event(recv) / 4];
	return rnic_need_kick(event, new, old);
}

static int rnic_ring(struct rnic_qp *qp, bool recv, uint16_t old, uint16_t new)
{
	return rnic_dp_publish(qp->db_page, recv, old, new) ? rnic_kick(qp, recv) : 0;
}

/* The operations of a UC QP: SEND and WRITE, with or without immediate data. */
static bool rnic_uc_op(uint8_t op)
{
	return op == RNIC_WQE_OP_SEND || op == RNIC_WQE_OP_SEND_IMM ||
	       op == RNIC_WQE_OP_RDMA_WRITE || op == RNIC_WQE_OP_RDMA_WRITE_IMM;
}

static bool rnic_wq_full(struct rnic_wq *wq)
{
	return rnic_ring_full(wq->pi, load16(&wq->ci), wq->log_size);
}

static int rnic_send_op(enum ibv_wr_opcode op, uint8_t *out)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
		*out = RNIC_WQE_OP_RDMA_WRITE;
		return 0;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		*out = RNIC_WQE_OP_RDMA_WRITE_IMM;
		return 0;
	case IBV_WR_RDMA_READ:
		*out = RNIC_WQE_OP_RDMA_READ;
		return 0;
	case IBV_WR_SEND:
		*out = RNIC_WQE_OP_SEND;
		return 0;
	case IBV_WR_SEND_WITH_IMM:
		*out = RNIC_WQE_OP_SEND_IMM;
		return 0;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		*out = RNIC_WQE_OP_ATOMIC_CMP_SWP;
		return 0;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		*out = RNIC_WQE_OP_ATOMIC_FETCH_ADD;
		return 0;
	case IBV_WR_ATOMIC_WRITE:
		*out = RNIC_WQE_OP_ATOMIC_WRITE;
		return 0;
	case IBV_WR_FLUSH:
		*out = RNIC_WQE_OP_FLUSH;
		return 0;
	default:
		return EINVAL;
	}
}

/*
 * Starts the send WQE in slot sq.pi: the header, with no data yet (rnic_wqe_sges(),
 * rnic_wqe_inline() add it). NULL and *err set when the ring is full or the request bad.
 * The caller publishes it by moving sq.pi on, and the ring by rnic_ring().
 */
static struct rnic_wqe *rnic_sq_begin(struct rnic_qp *qp, enum ibv_wr_opcode opcode,
				      unsigned int send_flags, uint64_t wr_id, uint64_t raddr,
				      uint32_t rkey, uint32_t imm, int *err)
{
	struct rnic_wq *wq = &qp->sq;
	uint32_t slot = rnic_ring_slot(wq->pi, wq->log_size);
	struct rnic_wqe *h = (struct rnic_wqe *)(wq->ring + rnic_ring_offset(wq->pi, wq->log_size,
									     wq->log_stride));
	bool remote;
	uint8_t op;

	if (rnic_wq_full(wq)) {
		*err = ENOMEM;
		return NULL;
	}
	/* UD (minor 16): SEND and SEND with immediate, raddr the destination QP, rkey the Q_Key. */
	if (rnic_send_op(opcode, &op) || (qp->vqp.qp.qp_type == IBV_QPT_UC && !rnic_uc_op(op)) ||
	    (qp->ud && ((op != RNIC_WQE_OP_SEND && op != RNIC_WQE_OP_SEND_IMM) || raddr >> 24)) ||
	    send_flags & ~(IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE | IBV_SEND_FENCE)) {
		*err = EINVAL;
		return NULL;
	}
	remote = qp->ud || (op != RNIC_WQE_OP_SEND && op != RNIC_WQE_OP_SEND_IMM);
	memset(h, 0, sizeof(*h));
	h->opcode = op;
	if (send_flags & IBV_SEND_SIGNALED || qp->sq_sig_all)
		h->flags |= RNIC_WQE_FLAG_SIGNALED;
	if (send_flags & IBV_SEND_SOLICITED)
		h->flags |= RNIC_WQE_FLAG_SOLICITED;
	if (op == RNIC_WQE_OP_RDMA_WRITE_IMM || op == RNIC_WQE_OP_SEND_IMM)
		h->imm_data = imm;
	h->wr_id = rnic_wrid(qp->gen, false, wq->pi);
	h->remote_addr = remote ? raddr : 0;
	h->rkey = remote ? rkey : 0;
	wq->wr_id[slot] = wr_id;
	return h;
}

static bool rnic_wqe_atomic(const struct rnic_wqe *h)
{
	return h->opcode == RNIC_WQE_OP_ATOMIC_CMP_SWP || h->opcode == RNIC_WQE_OP_ATOMIC_FETCH_ADD;
}

/* FLUSH and ATOMIC WRITE (contract minor 14) carry no SGE and no inline data. */
static bool rnic_wqe_bufferless(const struct rnic_wqe *h)
{
	return h->opcode == RNIC_WQE_OP_FLUSH || h->opcode == RNIC_WQE_OP_ATOMIC_WRITE;
}

/* An atomic's operands (contract minor 12), right after the header. */
static void rnic_wqe_atomic_ops(struct rnic_wqe *h, uint64_t swap_add, uint64_t compare)
{
	struct rnic_atomic_ops *ops = (struct rnic_atomic_ops *)(h + 1);

	ops->swap_add = swap_add;
	ops->compare = compare;
}

/* Where a send WQE's data starts: after the header, and a UD one's address vector. */
static uint8_t *rnic_wqe_body(const struct rnic_qp *qp, struct rnic_wqe *h)
{
	return (uint8_t *)(h + 1) + (qp->ud ? sizeof(struct rnic_ud_av) : 0);
}

/* A UD WQE's destination (minor 16): the AH's vector, the QP and its Q_Key. */
static void rnic_wqe_ud(struct rnic_wqe *h, const struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	memcpy(h + 1, &to_rah((struct ibv_ah *)ah)->av, sizeof(struct rnic_ud_av));
	h->remote_addr = qpn;
	h->rkey = qkey;
}

/* The WQE's scatter/gather list: after the header (and an atomic's operands). */
static int rnic_wqe_sges(struct rnic_qp *qp, struct rnic_wqe *h, size_t n,
			 const struct ibv_sge *sg)
{
	bool atomic = rnic_wqe_atomic(h);
	struct rnic_sge *sge = (struct rnic_sge *)(rnic_wqe_body(qp, h) +
						   (atomic ? sizeof(struct rnic_atomic_ops) : 0));
	size_t i;

	if (n > qp->max_send_sge || h->flags & RNIC_WQE_FLAG_INLINE || (atomic && n != 1) ||
	    (rnic_wqe_bufferless(h) && n))
		return EINVAL;
	for (i = 0; i < n; i++) {
		sge[i].addr = sg[i].addr;
		sge[i].length = sg[i].length;
		sge[i].lkey = sg[i].lkey;
	}
	h->num_sge = n;
	return 0;
}

/* Appends inline payload to the WQE (WRITE and SEND only; at most max_inline bytes). */
static int rnic_wqe_inline(struct rnic_qp *qp, struct rnic_wqe *h, const void *addr,
			   size_t len)
{
	if (h->opcode == RNIC_WQE_OP_RDMA_READ || rnic_wqe_atomic(h) || rnic_wqe_bufferless(h) ||
	    h->num_sge ||
	    len > qp->max_inline - h->inline_len)
		return EINVAL;
	memcpy(rnic_wqe_body(qp, h) + h->inline_len, addr, len);
	h->inline_len += len;
	h->flags |= RNIC_WQE_FLAG_INLINE;
	return 0;
}

static int rnic_write_send_wqe(struct rnic_qp *qp, const struct ibv_send_wr *wr)
{
	struct rnic_wqe *h;
	int err = 0, i;

	if (wr->num_sge < 0 || wr->opcode == IBV_WR_FLUSH || wr->opcode == IBV_WR_ATOMIC_WRITE)
		return EINVAL;
	if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		bool cas = wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP;

		if (wr->send_flags & IBV_SEND_INLINE || !to_rctx(qp->vqp.qp.context)->atomics)
			return EINVAL;
		h = rnic_sq_begin(qp, wr->opcode, wr->send_flags, wr->wr_id,
				  wr->wr.atomic.remote_addr, wr->wr.atomic.rkey, 0, &err);
		if (!h)
			return err;
		/* Fetch-and-add takes its addend in compare_add (libibverbs' layout). */
		rnic_wqe_atomic_ops(h, cas ? wr->wr.atomic.swap : wr->wr.atomic.compare_add,
				    cas ? wr->wr.atomic.compare_add : 0);
		err = rnic_wqe_sges(qp, h, wr->num_sge, wr->sg_list);
		if (!err)
			qp->sq.pi++;
		return err;
	}
	if (qp->ud) {
		if (!wr->wr.ud.ah || wr->wr.ud.remote_qpn >> 24)
			return EINVAL;
		h = rnic_sq_begin(qp, wr->opcode, wr->send_flags, wr->wr_id, wr->wr.ud.remote_qpn,
				  wr->wr.ud.remote_qkey, (uint32_t)wr->imm_data, &err);
		if (h)
			rnic_wqe_ud(h, wr->wr.ud.ah, wr->wr.ud.remote_qpn, wr->wr.ud.remote_qkey);
	} else {
		h = rnic_sq_begin(qp, wr->opcode, wr->send_flags, wr->wr_id, wr->wr.rdma.remote_addr,
				  wr->wr.rdma.rkey, (uint32_t)wr->imm_data, &err);
	}
	if (!h)
		return err;
	if (wr->send_flags & IBV_SEND_INLINE && h->opcode != RNIC_WQE_OP_RDMA_READ) {
		for (i = 0; i < wr->num_sge && !err; i++)
			err = rnic_wqe_inline(qp, h, (void *)(uintptr_t)wr->sg_list[i].addr,
					      wr->sg_list[i].length);
	} else {
		err = rnic_wqe_sges(qp, h, wr->num_sge, wr->sg_list);
	}
	if (!err)
		qp->sq.pi++;
	return err;
}

/*
 * Sends are posted only from RTS on (IBA 11.4.1.1: RESET, INIT and RTR give an immediate
 * error, as rxe's); libibverbs keeps the state its modify_qp set (ERROR still flushes).
 */
static bool rnic_can_send(const struct ibv_qp *ibqp)
{
	return ibqp->state != IBV_QPS_RESET && ibqp->state != IBV_QPS_INIT && ibqp->state != IBV_QPS_RTR;
}

int rnic_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	struct rnic_qp *qp = to_rqp(ibqp);
	uint16_t old;
	int err = 0, kick;

	if (!rnic_can_send(ibqp)) {
		*bad_wr = wr;
		return EINVAL;
	}
	pthread_spin_lock(&qp->sq.lock);
	old = qp->sq.pi;
	for (; wr; wr = wr->next) {
		err = rnic_write_send_wqe(qp, wr);
		if (err) {
			*bad_wr = wr;
			break;
		}
	}
	if (qp->sq.pi != old) {
		kick = rnic_ring(qp, false, old, qp->sq.pi);
		if (!err)
			err = kick;
	}
	pthread_spin_unlock(&qp->sq.lock);
	return err;
}

/*
 * The extended send API (ibv_wr_start() ... ibv_wr_complete()): each operation starts a WQE
 * (rnic_sq_begin()), the setters fill it, and wr_complete() publishes the batch with one
 * rnic_ring(); the first error fails the whole batch, as wr_abort() drops it.
 */
static struct rnic_qp *to_xqp(struct ibv_qp_ex *ibqpx)
{
	return container_of(ibqpx, struct rnic_qp, vqp.qp_ex);
}

static void rnic_wr_start(struct ibv_qp_ex *ibqpx)
{
	struct rnic_qp *qp = to_xqp(ibqpx);

	pthread_spin_lock(&qp->sq.lock);
	qp->wr_start = qp->sq.pi;
	qp->wr_err = rnic_can_send(&qp->vqp.qp) ? 0 : EINVAL;
	qp->wr_cur = NULL;
}

static int rnic_wr_complete(struct ibv_qp_ex *ibqpx)
{
	struct rnic_qp *qp = to_xqp(ibqpx);
	int err = qp->wr_err;

	if (err)
		qp->sq.pi = qp->wr_start;
	else if (qp->sq.pi != qp->wr_start)
		err = rnic_ring(qp, false, qp->wr_start, qp->sq.pi);
	pthread_spin_unlock(&qp->sq.lock);
	return err;
}

static void rnic_wr_abort(struct ibv_qp_ex *ibqpx)
{
	struct rnic_qp *qp = to_xqp(ibqpx);

	qp->sq.pi = qp->wr_start;
	pthread_spin_unlock(&qp->sq.lock);
}

static void rnic_wr_op(struct ibv_qp_ex *ibqpx, enum ibv_wr_opcode op, uint32_t rkey,
		       uint64_t raddr, uint32_t imm)
{
	struct rnic_qp *qp = to_xqp(ibqpx);

	qp->wr_cur = NULL;
	if (qp->wr_err)
		return;
	qp->wr_cur = rnic_sq_begin(qp, op, ibqpx->wr_flags, ibqpx->wr_id, raddr, rkey, imm,
				   &qp->wr_err);
	if (qp->wr_cur)
		qp->sq.pi++;
}

static void rnic_wr_rdma_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr)
{
	rnic_wr_op(q, IBV_WR_RDMA_WRITE, rkey, raddr, 0);
}

static void rnic_wr_rdma_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr,
				   __be32 imm)
{
	rnic_wr_op(q, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, raddr, (uint32_t)imm);
}

static void rnic_wr_rdma_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr)
{
	rnic_wr_op(q, IBV_WR_RDMA_READ, rkey, raddr, 0);
}

static void rnic_wr_atomic(struct ibv_qp_ex *q, enum ibv_wr_opcode op, uint32_t rkey,
			   uint64_t raddr, uint64_t swap_add, uint64_t compare)
{
	struct rnic_qp *qp = to_xqp(q);

	rnic_wr_op(q, op, rkey, raddr, 0);
	if (qp->wr_cur)
		rnic_wqe_atomic_ops(qp->wr_cur, swap_add, compare);
}

static void rnic_wr_atomic_cmp_swp(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr,
				   uint64_t compare, uint64_t swap)
{
	rnic_wr_atomic(q, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, raddr, swap, compare);
}

static void rnic_wr_atomic_fetch_add(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr,
				     uint64_t add)
{
	rnic_wr_atomic(q, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, raddr, add, 0);
}

/* An operation refused before it starts a WQE: the batch fails with the first error. */
static void rnic_wr_fail(struct rnic_qp *qp, int err)
{
	if (!qp->wr_err)
		qp->wr_err = err;
	qp->wr_cur = NULL;
}

/* IBTA 1.5 ATOMIC WRITE (minor 14): the 8 bytes at @atomic_wr travel in the operands. */
static void rnic_wr_atomic_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr,
				 const void *atomic_wr)
{
	struct rnic_qp *qp = to_xqp(q);
	uint64_t v;

	if (!to_rctx(qp->vqp.qp.context)->flush) {
		rnic_wr_fail(qp, EOPNOTSUPP);
		return;
	}
	memcpy(&v, atomic_wr, sizeof(v));
	rnic_wr_atomic(q, IBV_WR_ATOMIC_WRITE, rkey, raddr, v, 0);
}

/*
 * IBTA 1.5 RDMA FLUSH (minor 14): the FETH byte (placement type, selectivity level) in the
 * header's rsvd0, the range's length in imm_data (2^32 - 1 at most; a whole-MR FLUSH
 * ignores it).
 */
static void rnic_wr_flush(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr, size_t len,
			  uint8_t type, uint8_t level)
{
	struct rnic_qp *qp = to_xqp(q);

	if (!to_rctx(qp->vqp.qp.context)->flush) {
		rnic_wr_fail(qp, EOPNOTSUPP);
		return;
	}
	if (!type || type & ~(IBV_FLUSH_GLOBAL | IBV_FLUSH_PERSISTENT) || level > IBV_FLUSH_MR ||
	    (level == IBV_FLUSH_RANGE && len > UINT32_MAX)) {
		rnic_wr_fail(qp, EINVAL);
		return;
	}
	rnic_wr_op(q, IBV_WR_FLUSH, rkey, raddr, 0);
	if (qp->wr_cur) {
		qp->wr_cur->rsvd0 = (uint8_t)(level << 4 | type);
		qp->wr_cur->imm_data = level == IBV_FLUSH_RANGE ? (uint32_t)len : 0;
	}
}

static void rnic_wr_send(struct ibv_qp_ex *q)
{
	rnic_wr_op(q, IBV_WR_SEND, 0, 0, 0);
}

static void rnic_wr_send_imm(struct ibv_qp_ex *q, __be32 imm)
{
	rnic_wr_op(q, IBV_WR_SEND_WITH_IMM, 0, 0, (uint32_t)imm);
}

/* The data of the operation just started; nothing to fill after a failed one. */
static struct rnic_wqe *rnic_wr_cur(struct rnic_qp *qp)
{
	if (!qp->wr_cur && !qp->wr_err)
		qp->wr_err = EINVAL;	/* a setter without an operation */
	return qp->wr_err ? NULL : qp->wr_cur;
}

static void rnic_wr_set_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *sg)
{
	struct rnic_qp *qp = to_xqp(q);
	struct rnic_wqe *h = rnic_wr_cur(qp);

	if (h)
		qp->wr_err = rnic_wqe_sges(qp, h, n, sg);
}

static void rnic_wr_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge sge = { .addr = addr, .length = length, .lkey = lkey };

	rnic_wr_set_sge_list(q, 1, &sge);
}

static void rnic_wr_set_inline_data_list(struct ibv_qp_ex *q, size_t n,
					 const struct ibv_data_buf *bufs)
{
	struct rnic_qp *qp = to_xqp(q);
	struct rnic_wqe *h = rnic_wr_cur(qp);
	size_t i;

	for (i = 0; h && i < n && !qp->wr_err; i++)
		qp->wr_err = rnic_wqe_inline(qp, h, bufs[i].addr, bufs[i].length);
}

/* ibv_wr_set_ud_addr() (minor 16): the destination of the UD WQE just started. */
static void rnic_wr_set_ud_addr(struct ibv_qp_ex *q, struct ibv_ah *ah, uint32_t remote_qpn,
				uint32_t remote_qkey)
{
	struct rnic_qp *qp = to_xqp(q);
	struct rnic_wqe *h = rnic_wr_cur(qp);

	if (!h)
		return;
	if (!ah || remote_qpn >> 24) {
		rnic_wr_fail(qp, EINVAL);
		return;
	}
	rnic_wqe_ud(h, ah, remote_qpn, remote_qkey);
}

static void rnic_wr_set_inline_data(struct ibv_qp_ex *q, void *addr, size_t length)
{
	struct ibv_data_buf buf = { .addr = addr, .length = length };

	rnic_wr_set_inline_data_list(q, 1, &buf);
}

/* The operations of IBV_QP_EX_WITH_*: EOPNOTSUPP for any other (atomics: on a device with). */
int rnic_qp_ex_init(struct rnic_qp *qp, uint64_t send_ops_flags, bool atomics, bool flush,
		    enum ibv_qp_type type)
{
	bool uc = type == IBV_QPT_UC, ud = type == IBV_QPT_UD;
	struct ibv_qp_ex *x = &qp->vqp.qp_ex;
	uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
		       IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;

	/* UC has SEND and WRITE only (contract minor 13), UD SEND only (minor 16). */
	if (ud)
		ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
	if (!uc && !ud)
		ops |= IBV_QP_EX_WITH_RDMA_READ;
	if (atomics && !uc && !ud)
		ops |= IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	if (flush && !uc && !ud)
		ops |= IBV_QP_EX_WITH_FLUSH | IBV_QP_EX_WITH_ATOMIC_WRITE;
	if (send_ops_flags & ~ops)
		return EOPNOTSUPP;
	x->wr_start = rnic_wr_start;
	x->wr_complete = rnic_wr_complete;
	x->wr_abort = rnic_wr_abort;
	x->wr_rdma_write = rnic_wr_rdma_write;
	x->wr_rdma_write_imm = rnic_wr_rdma_write_imm;
	x->wr_rdma_read = rnic_wr_rdma_read;
	x->wr_send = rnic_wr_send;
	x->wr_send_imm = rnic_wr_send_imm;
	x->wr_atomic_cmp_swp = rnic_wr_atomic_cmp_swp;
	x->wr_atomic_fetch_add = rnic_wr_atomic_fetch_add;
	x->wr_atomic_write = rnic_wr_atomic_write;
	x->wr_flush = rnic_wr_flush;
	x->wr_set_sge = rnic_wr_set_sge;
	x->wr_set_sge_list = rnic_wr_set_sge_list;
	x->wr_set_inline_data = rnic_wr_set_inline_data;
	x->wr_set_inline_data_list = rnic_wr_set_inline_data_list;
	x->wr_set_ud_addr = rnic_wr_set_ud_addr;
	return 0;
}

/* A RECV WQE at @w: the caller's SGEs (num_sge checked), the device-visible @wr_id. */
void rnic_write_recv_wqe(uint8_t *w, const struct ibv_recv_wr *wr, uint64_t wr_id)
{
	struct rnic_wqe *h = (struct rnic_wqe *)w;
	struct rnic_sge *sge = (struct rnic_sge *)(w + sizeof(*h));
	int i;

	memset(h, 0, sizeof(*h));
	for (i = 0; i < wr->num_sge; i++) {
		sge[i].addr = wr->sg_list[i].addr;
		sge[i].length = wr->sg_list[i].length;
		sge[i].lkey = wr->sg_list[i].lkey;
	}
	h->opcode = RNIC_WQE_OP_RECV;
	h->num_sge = wr->num_sge;
	h->wr_id = wr_id;
}

int rnic_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	struct rnic_qp *qp = to_rqp(ibqp);
	struct rnic_wq *wq = &qp->rq;
	uint16_t old;
	int err = 0, kick;

	/* Its receives are posted to the SRQ; none to a QP in RESET (IBA 11.4.1.2, as rxe). */
	if (ibqp->srq || ibqp->state == IBV_QPS_RESET) {
		*bad_wr = wr;
		return EINVAL;
	}
	pthread_spin_lock(&wq->lock);
	old = wq->pi;
	for (; wr; wr = wr->next) {
		uint32_t slot = rnic_ring_slot(wq->pi, wq->log_size);
		uint8_t *w = wq->ring + rnic_ring_offset(wq->pi, wq->log_size, wq->log_stride);

		if (rnic_wq_full(wq)) {
			err = ENOMEM;
		} else if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->max_recv_sge) {
			err = EINVAL;
		}
		if (err) {
			*bad_wr = wr;
			break;
		}
		rnic_write_recv_wqe(w, wr, rnic_wrid(qp->gen, true, wq->pi));
		wq->wr_id[slot] = wr->wr_id;
		wq->pi++;
	}
	if (wq->pi != old) {
		kick = rnic_ring(qp, true, old, wq->pi);
		if (!err)
			err = kick;
	}
	pthread_spin_unlock(&wq->lock);
	return err;
}

static enum ibv_wc_opcode rnic_wc_opcode(uint8_t op)
{
	switch (op) {
	case RNIC_CQE_OP_RDMA_READ:
		return IBV_WC_RDMA_READ;
	case RNIC_CQE_OP_SEND:
		return IBV_WC_SEND;
	case RNIC_CQE_OP_RECV:
		return IBV_WC_RECV;
	case RNIC_CQE_OP_RECV_RDMA_IMM:
		return IBV_WC_RECV_RDMA_WITH_IMM;
	case RNIC_CQE_OP_ATOMIC_CMP_SWP:
		return IBV_WC_COMP_SWAP;
	case RNIC_CQE_OP_ATOMIC_FETCH_ADD:
		return IBV_WC_FETCH_ADD;
	case RNIC_CQE_OP_ATOMIC_WRITE:
		return IBV_WC_ATOMIC_WRITE;
	case RNIC_CQE_OP_FLUSH:
		return IBV_WC_FLUSH;
	default:
		return IBV_WC_RDMA_WRITE;
	}
}

/* Matches a CQE to its QP and slot and frees the slots up to it; false: stale, drop it. */
static bool rnic_cqe_to_wc(struct rnic_context *ctx, const struct rnic_cqe *cqe,
			   struct ibv_wc *wc)
{
	bool recv = rnic_wrid_recv(cqe->wr_id);
	uint16_t idx = rnic_wrid_index(cqe->wr_id);
	struct rnic_qp *qp;
	struct rnic_wq *wq;
	uint16_t outstanding, off;
	uint64_t wr_id;

	if (cqe->qpn >= ctx->max_qp)
		return false;
	qp = __atomic_load_n(&ctx->qp_table[cqe->qpn], __ATOMIC_ACQUIRE);
	if (!qp || !rnic_wrid_valid(cqe->wr_id))
		return false;
	if (recv && qp->vqp.qp.srq) {
		/* A WQE of the QP's SRQ, by its tag (rnic_srq.c). */
		if (!rnic_srq_complete(to_rsrq(qp->vqp.qp.srq), cqe->wr_id, &wr_id))
			return false;
	} else {
		if (qp->gen != rnic_wrid_gen(cqe->wr_id))
			return false;
		wq = recv ? &qp->rq : &qp->sq;
		outstanding = __atomic_load_n(&wq->pi, __ATOMIC_ACQUIRE) - wq->ci;
		off = idx - wq->ci;
		if (off >= outstanding)
			return false;
		wr_id = wq->wr_id[rnic_ring_slot(idx, wq->log_size)];
		store16(&wq->ci, idx + 1);
	}
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = wr_id;
	wc->status = cqe->status;
	wc->opcode = rnic_wc_opcode(cqe->opcode);
	wc->vendor_err = cqe->syndrome;
	wc->byte_len = cqe->byte_len;
	wc->qp_num = cqe->qpn;
	wc->src_qp = cqe->src_qp;
	/* A UD receive (minor 16): the GRH area leads the buffer (ibv_create_ah_from_wc reads it). */
	if (cqe->flags & RNIC_CQE_FLAG_GRH)
		wc->wc_flags |= IBV_WC_GRH;
	if (cqe->flags & RNIC_CQE_FLAG_IMM) {
		wc->wc_flags |= IBV_WC_WITH_IMM;
		wc->imm_data = cqe->imm_data;
	}
	return true;
}

/*
 * The next completion of the CQ into *wc (stale CQEs of destroyed or reset QPs are
 * consumed and dropped); false when the ring holds none. Under cq->lock; the caller
 * reports the consumer index (rnic_cq_report) when it is done.
 */
static bool rnic_cq_next(struct rnic_cq *cq, struct ibv_wc *wc)
{
	struct rnic_context *ctx = to_rctx(cq->vcq.cq.context);
	uint32_t mask = (1U << cq->log_size) - 1, consumed;
	volatile struct rnic_cqe *slot;
	struct rnic_cqe cqe;

	for (consumed = 0; consumed <= mask; consumed++) {
		slot = &cq->ring[rnic_ring_slot(cq->ci, cq->log_size)];
		if (slot->owner != rnic_ring_owner(cq->ci, cq->log_size))
			return false;
		udma_from_device_barrier();	/* the owner byte is written last */
		memcpy(&cqe, (const void *)slot, sizeof(cqe));
		cq->ci++;
		if (rnic_cqe_to_wc(ctx, &cqe, wc))
			return true;
	}
	return false;
}

/*
 * Tells the device how far software has consumed (its doorbell page). The CQEs were read
 * (copied out) before: the fence keeps those reads ahead of the store, so the device never
 * refills a slot still being read.
 */
static void rnic_cq_report(struct rnic_cq *cq)
{
	atomic_thread_fence(memory_order_seq_cst);
	((volatile uint32_t *)cq->db_page)[RNIC_DBP_CQ_CI / 4] = cq->ci & 0xffff;
}

int rnic_poll_cq(struct ibv_cq *ibcq, int ne, struct ibv_wc *wc)
{
	struct rnic_cq *cq = to_rcq(ibcq);
	uint32_t before;
	int got = 0;

	pthread_spin_lock(&cq->lock);
	before = cq->ci;
	while (got < ne && rnic_cq_next(cq, &wc[got]))
		got++;
	if (cq->ci != before)
		rnic_cq_report(cq);
	pthread_spin_unlock(&cq->lock);
	return got;
}

/* The extended poll API: the lock is held from start_poll() to end_poll(). */
static struct rnic_cq *to_xcq(struct ibv_cq_ex *ibcqx)
{
	return container_of(ibcqx, struct rnic_cq, vcq.cq_ex);
}

static int rnic_cq_ex_take(struct rnic_cq *cq)
{
	if (!rnic_cq_next(cq, &cq->cur))
		return ENOENT;
	cq->vcq.cq_ex.wr_id = cq->cur.wr_id;
	cq->vcq.cq_ex.status = cq->cur.status;
	return 0;
}

static int rnic_start_poll(struct ibv_cq_ex *ibcqx, struct ibv_poll_cq_attr *attr)
{
	struct rnic_cq *cq = to_xcq(ibcqx);
	int ret;

	if (attr->comp_mask)
		return EINVAL;
	pthread_spin_lock(&cq->lock);
	ret = rnic_cq_ex_take(cq);
	if (ret) {
		rnic_cq_report(cq);	/* stale entries may have been dropped */
		pthread_spin_unlock(&cq->lock);
	}
	return ret;
}

static int rnic_next_poll(struct ibv_cq_ex *ibcqx)
{
	return rnic_cq_ex_take(to_xcq(ibcqx));
}

static void rnic_end_poll(struct ibv_cq_ex *ibcqx)
{
	struct rnic_cq *cq = to_xcq(ibcqx);

	rnic_cq_report(cq);
	pthread_spin_unlock(&cq->lock);
}

static enum ibv_wc_opcode rnic_read_opcode(struct ibv_cq_ex *q)
{
	return to_xcq(q)->cur.opcode;
}

static uint32_t rnic_read_vendor_err(struct ibv_cq_ex *q)
{
	return to_xcq(q)->cur.vendor_err;
}

static unsigned int rnic_read_wc_flags(struct ibv_cq_ex *q)
{
	return to_xcq(q)->cur.wc_flags;
}

static uint32_t rnic_read_byte_len(struct ibv_cq_ex *q)
{
	return to_xcq(q)->cur.byte_len;
}

static __be32 rnic_read_imm_data(struct ibv_cq_ex *q)
{
	return to_xcq(q)->cur.imm_data;
}

static uint32_t rnic_read_qp_num(struct ibv_cq_ex *q)
{
	return to_xcq(q)->cur.qp_num;
}

static uint32_t rnic_read_src_qp(struct ibv_cq_ex *q)
{
	return to_xcq(q)->cur.src_qp;
}

/* RoCE: no LIDs, no service level in the completion. */
static uint32_t rnic_read_slid(struct ibv_cq_ex *q)
{
	return 0;
}

static uint8_t rnic_read_sl(struct ibv_cq_ex *q)
{
	return 0;
}

static uint8_t rnic_read_dlid_path_bits(struct ibv_cq_ex *q)
{
	return 0;
}

/* Fills the extended poll API; a reader is set only for the fields the user asked for. */
void rnic_cq_ex_init(struct rnic_cq *cq, uint64_t wc_flags)
{
	struct ibv_cq_ex *x = &cq->vcq.cq_ex;

	x->start_poll = rnic_start_poll;
	x->next_poll = rnic_next_poll;
	x->end_poll = rnic_end_poll;
	x->read_opcode = rnic_read_opcode;
	x->read_vendor_err = rnic_read_vendor_err;
	x->read_wc_flags = rnic_read_wc_flags;
	if (wc_flags & IBV_WC_EX_WITH_BYTE_LEN)
		x->read_byte_len = rnic_read_byte_len;
	if (wc_flags & IBV_WC_EX_WITH_IMM)
		x->read_imm_data = rnic_read_imm_data;
	if (wc_flags & IBV_WC_EX_WITH_QP_NUM)
		x->read_qp_num = rnic_read_qp_num;
	if (wc_flags & IBV_WC_EX_WITH_SRC_QP)
		x->read_src_qp = rnic_read_src_qp;
	if (wc_flags & IBV_WC_EX_WITH_SLID)
		x->read_slid = rnic_read_slid;
	if (wc_flags & IBV_WC_EX_WITH_SL)
		x->read_sl = rnic_read_sl;
	if (wc_flags & IBV_WC_EX_WITH_DLID_PATH_BITS)
		x->read_dlid_path_bits = rnic_read_dlid_path_bits;
}

/* The consumer index is in the doorbell page already (poll_cq); the kernel arms. */
int rnic_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct rnic_cq *cq = to_rcq(ibcq);

	pthread_spin_lock(&cq->lock);
	rnic_cq_report(cq);
	pthread_spin_unlock(&cq->lock);
	return ibv_cmd_req_notify_cq(ibcq, solicited_only);
}
