// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-verbs-check: error-semantics scenarios on one rnic-emu RNIC (loopback: QP A is the
 * requester, QP B the responder, both on /dev/rnic_emuN). Each scenario prints
 * "key: value" lines for a test harness, which judges the values; the exit status is 0
 * when the scenario ran, 1 when it could not run (setup failed, a completion that must
 * come never came), 2 for bad usage.
 *
 *   rnic-verbs-check [-d DEV] SCENARIO|all
 */
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>

#include "rnic_tool_verbs.h"

#define CHK_BUF		65536
#define CHK_LEN		4096
#define CHK_TIMEOUT_MS	5000
#define ACC_ALL		(RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ)
#define QP_ACC		(RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ)

struct chk {
	const char *dev;
	int fd;
	struct rnic_query_device q;
	uint32_t pd, cq_a, cq_b, qp_a, qp_b;
	uint8_t *src, *dst;
	struct rv_mr src_mr, dst_mr;
};

/* Fresh file, PD, CQs, MRs (dst with dst_access), QPs connected with rnr_retry. */
static int setup(struct chk *c, const char *dev, uint32_t dst_access, uint32_t rnr_retry)
{
	struct rnic_create_qp qp;

	memset(c, 0, sizeof(*c));
	c->dev = dev;
	c->fd = rv_open(dev, &c->q);
	if (c->fd < 0)
		return -1;
	c->src = rv_alloc_buf(CHK_BUF);
	c->dst = rv_alloc_buf(CHK_BUF);
	if (!c->src || !c->dst)
		return -1;
	rv_pattern_fill(c->src, CHK_BUF, 7);
	if (rv_alloc_pd(c->fd, &c->pd) ||
	    rv_create_cq(c->fd, 64, &c->cq_a) || rv_create_cq(c->fd, 64, &c->cq_b) ||
	    rv_reg_mr(c->fd, c->pd, c->src, CHK_BUF, ACC_ALL, &c->src_mr) ||
	    rv_reg_mr(c->fd, c->pd, c->dst, CHK_BUF, dst_access, &c->dst_mr))
		return -1;

	memset(&qp, 0, sizeof(qp));
	qp.pd = c->pd;
	qp.max_send_wr = 16;
	qp.max_recv_wr = 16;
	qp.max_send_sge = 2;
	qp.max_recv_sge = 2;
	qp.send_cqn = qp.recv_cqn = c->cq_a;
	if (rv_create_qp(c->fd, &qp))
		return -1;
	c->qp_a = qp.qpn;
	qp.send_cqn = qp.recv_cqn = c->cq_b;
	if (rv_create_qp(c->fd, &qp))
		return -1;
	c->qp_b = qp.qpn;
	if (rv_connect_qp(c->fd, c->qp_a, c->qp_b, QP_ACC, rnr_retry, 100) ||
	    rv_connect_qp(c->fd, c->qp_b, c->qp_a, QP_ACC, 7, 100))
		return -1;
	return 0;
}

static void teardown(struct chk *c)
{
	if (c->fd >= 0)
		close(c->fd);	/* the driver destroys every object of the file */
	if (c->src)
		munmap(c->src, CHK_BUF);
	if (c->dst)
		munmap(c->dst, CHK_BUF);
}

/* One completion from cqn, or an error line and -1. */
static int poll_one(struct chk *c, uint32_t cqn, struct rnic_wc *wc, const char *what)
{
	int n = rv_poll_cq(c->fd, cqn, wc, 1, CHK_TIMEOUT_MS);

	if (n < 0)
		return -1;
	if (n == 0) {
		printf("error: no completion for %s within %u ms\n", what, CHK_TIMEOUT_MS);
		return -1;
	}
	return 0;
}

static void print_wc(const char *prefix, const struct rnic_wc *wc)
{
	printf("%sstatus: %s\n", prefix, rv_wc_status_name(wc->status));
	printf("%sstatus_code: %u\n", prefix, wc->status);
	printf("%ssyndrome: %s\n", prefix, rv_qp_err_name(wc->syndrome));
	printf("%ssyndrome_code: %u\n", prefix, wc->syndrome);
	printf("%swr_id: %llu\n", prefix, (unsigned long long)wc->wr_id);
	printf("%sopcode: %s\n", prefix, rv_cqe_op_name(wc->opcode));
}

static int print_qp(struct chk *c, const char *prefix, uint32_t qpn)
{
	struct rnic_query_qp q;

	if (rv_query_qp(c->fd, qpn, &q))
		return -1;
	printf("%sqp_state: %s\n", prefix, rv_qp_state_name(q.qp_state));
	printf("%serr_reason: %s\n", prefix, rv_qp_err_name(q.err_reason));
	return 0;
}

static void write_wr(struct chk *c, struct rnic_send_wr *wr, uint64_t id, uint32_t opcode,
		     uint32_t len, uint64_t remote, uint32_t rkey, uint32_t lkey)
{
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = id;
	wr->opcode = (uint8_t)opcode;
	wr->flags = RNIC_WQE_FLAG_SIGNALED;
	wr->remote_addr = remote;
	wr->rkey = rkey;
	wr->num_sge = 1;
	wr->sge[0].addr = (uintptr_t)c->src;
	wr->sge[0].length = len;
	wr->sge[0].lkey = lkey;
}

static int post_recv(struct chk *c, uint32_t qpn, uint64_t id, void *buf, uint32_t len,
		     uint32_t lkey)
{
	struct rnic_recv_wr r;

	memset(&r, 0, sizeof(r));
	r.wr_id = id;
	r.num_sge = 1;
	r.sge[0].addr = (uintptr_t)buf;
	r.sge[0].length = len;
	r.sge[0].lkey = lkey;
	return rv_post_recv(c->fd, qpn, &r, 1);
}

/* Posts wr on QP A and prints its completion and QP A's state; *wc gets the completion. */
static int post_and_report(struct chk *c, struct rnic_send_wr *wr, struct rnic_wc *wc)
{
	if (rv_post_send(c->fd, c->qp_a, wr, 1) || poll_one(c, c->cq_a, wc, "the work request"))
		return -1;
	print_wc("", wc);
	return print_qp(c, "", c->qp_a);
}

/* After an error: a further WR on QP A must complete with WR_FLUSH_ERR. */
static int show_flush(struct chk *c)
{
	struct rnic_send_wr wr;
	struct rnic_wc wc;

	write_wr(c, &wr, 2, RNIC_WQE_OP_RDMA_WRITE, 64, (uintptr_t)c->dst, c->dst_mr.rkey,
		 c->src_mr.lkey);
	if (rv_post_send(c->fd, c->qp_a, &wr, 1) || poll_one(c, c->cq_a, &wc, "the flushed WR"))
		return -1;
	printf("next_status: %s\n", rv_wc_status_name(wc.status));
	printf("next_wr_id: %llu\n", (unsigned long long)wc.wr_id);
	printf("flushed: %d\n", wc.status == RNIC_WC_WR_FLUSH_ERR && wc.wr_id == 2);
	return 0;
}

/* Same MR index, another generation byte: a stale key. */
static uint32_t stale_key(uint32_t key)
{
	return (key & ~0xffu) | ((key + 1) & 0xffu);
}

static int sc_rkey_error(struct chk *c)
{
	struct rnic_send_wr wr;
	struct rnic_wc wc;
	uint32_t bad = stale_key(c->dst_mr.rkey);

	printf("rkey: 0x%x\n", bad);
	write_wr(c, &wr, 1, RNIC_WQE_OP_RDMA_WRITE, CHK_LEN, (uintptr_t)c->dst, bad,
		 c->src_mr.lkey);
	if (post_and_report(c, &wr, &wc))
		return -1;
	return show_flush(c);
}

static int sc_access_error(struct chk *c)
{
	struct rnic_send_wr wr;
	struct rnic_wc wc;

	write_wr(c, &wr, 1, RNIC_WQE_OP_RDMA_WRITE, CHK_LEN, (uintptr_t)c->dst, c->dst_mr.rkey,
		 c->src_mr.lkey);
	if (post_and_report(c, &wr, &wc))
		return -1;
	printf("dst_untouched: %d\n", c->dst[0] == 0 && c->dst[CHK_LEN - 1] == 0);
	return 0;
}

static int sc_range_error(struct chk *c)
{
	struct rnic_send_wr wr;
	struct rnic_wc wc;

	/* Starts inside the MR, ends 100 bytes past it. */
	write_wr(c, &wr, 1, RNIC_WQE_OP_RDMA_WRITE, CHK_LEN,
		 (uintptr_t)c->dst + CHK_BUF - CHK_LEN + 100, c->dst_mr.rkey, c->src_mr.lkey);
	if (post_and_report(c, &wr, &wc))
		return -1;
	printf("dst_untouched: %d\n", c->dst[CHK_BUF - CHK_LEN + 100] == 0);
	return 0;
}

static int sc_lkey_error(struct chk *c)
{
	struct rnic_send_wr wr;
	struct rnic_wc wc;
	uint32_t bad = stale_key(c->src_mr.lkey);

	printf("lkey: 0x%x\n", bad);
	write_wr(c, &wr, 1, RNIC_WQE_OP_RDMA_WRITE, CHK_LEN, (uintptr_t)c->dst, c->dst_mr.rkey,
		 bad);
	return post_and_report(c, &wr, &wc);
}

static int sc_rnr(struct chk *c)
{
	struct rnic_send_wr wr;
	struct rnic_wc wc;
	uint64_t t0 = rv_now_ns();

	write_wr(c, &wr, 1, RNIC_WQE_OP_SEND, 64, 0, 0, c->src_mr.lkey);
	if (post_and_report(c, &wr, &wc))
		return -1;
	printf("elapsed_us: %llu\n", (unsigned long long)((rv_now_ns() - t0) / 1000));
	return 0;
}

static int sc_send_too_long(struct chk *c)
{
	struct rnic_send_wr wr;
	struct rnic_wc wc;

	if (post_recv(c, c->qp_b, 50, c->dst, 64, c->dst_mr.lkey))
		return -1;
	write_wr(c, &wr, 1, RNIC_WQE_OP_SEND, CHK_LEN, 0, 0, c->src_mr.lkey);
	if (post_and_report(c, &wr, &wc))
		return -1;
	if (poll_one(c, c->cq_b, &wc, "the responder's RECV"))
		return -1;
	print_wc("recv_", &wc);
	return print_qp(c, "recv_", c->qp_b);
}

static int sc_flush(struct chk *c)
{
	struct rnic_wc wcs[8];
	uint32_t got = 0, i, ok = 1;
	int n;

	for (i = 0; i < 5; i++)
		if (post_recv(c, c->qp_b, 100 + i, c->dst + i * 1024, 1024, c->dst_mr.lkey))
			return -1;
	if (rv_modify_qp(c->fd, c->qp_b, RNIC_QPS_ERR, 0, 0, 0, 0, 0))
		return -1;
	while (got < 5) {
		n = rv_poll_cq(c->fd, c->cq_b, wcs + got, 8 - got, CHK_TIMEOUT_MS);
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		got += (uint32_t)n;
	}
	/* Anything more would be a spurious completion. */
	n = rv_poll_cq(c->fd, c->cq_b, wcs + got, 8 - got, 100);
	if (n > 0)
		got += (uint32_t)n;
	printf("completions: %u\n", got);
	printf("wr_ids:");
	for (i = 0; i < got; i++) {
		printf(" %llu", (unsigned long long)wcs[i].wr_id);
		if (wcs[i].status != RNIC_WC_WR_FLUSH_ERR || wcs[i].wr_id != 100 + i)
			ok = 0;
	}
	printf("\nstatuses:");
	for (i = 0; i < got; i++)
		printf(" %s", rv_wc_status_name(wcs[i].status));
	printf("\n");
	for (i = 0; i < got && wcs[i].status == RNIC_WC_WR_FLUSH_ERR; i++)
		;
	printf("flushed: %u\n", i);
	printf("flush_ok: %u\n", ok && got == 5);
	return print_qp(c, "", c->qp_b);
}

static int sc_write_imm(struct chk *c)
{
	struct rnic_send_wr wr;
	struct rnic_wc wc;

	if (post_recv(c, c->qp_b, 60, c->dst + CHK_BUF / 2, 64, c->dst_mr.lkey))
		return -1;
	write_wr(c, &wr, 1, RNIC_WQE_OP_RDMA_WRITE_IMM, CHK_LEN, (uintptr_t)c->dst,
		 c->dst_mr.rkey, c->src_mr.lkey);
	wr.imm_data = 0x12345678;
	if (post_and_report(c, &wr, &wc))
		return -1;
	if (poll_one(c, c->cq_b, &wc, "the responder's RECV"))
		return -1;
	print_wc("recv_", &wc);
	printf("recv_imm: 0x%08x\n", wc.imm_data);
	printf("recv_imm_flag: %d\n", !!(wc.flags & RNIC_CQE_FLAG_IMM));
	printf("recv_byte_len: %u\n", wc.byte_len);
	printf("recv_src_qp_ok: %d\n", wc.src_qp == c->qp_a);
	printf("data_ok: %d\n", memcmp(c->dst, c->src, CHK_LEN) == 0);
	return 0;
}

static const char *errno_name(int ok, int e)
{
	if (ok)
		return "OK";
	switch (e) {
	case EINVAL:	return "EINVAL";
	case ENOENT:	return "ENOENT";
	case EBUSY:	return "EBUSY";
	case ENOMEM:	return "ENOMEM";
	case EFAULT:	return "EFAULT";
	case EIO:	return "EIO";
	default:	return strerror(e);
	}
}

/* Runs one ioctl expected to fail; prints "key: ERRNO". */
static void expect(const char *key, int fd, unsigned long req, void *arg)
{
	int ok = ioctl(fd, req, arg) == 0;

	printf("%s: %s\n", key, errno_name(ok, errno));
}

/* A small extra QP on CQ A, moved to INIT. */
static int create_init_qp(struct chk *c, struct rnic_create_qp *qp)
{
	memset(qp, 0, sizeof(*qp));
	qp->pd = c->pd;
	qp->max_send_wr = 4;
	qp->max_recv_wr = 4;
	qp->max_send_sge = 1;
	qp->max_recv_sge = 1;
	qp->send_cqn = qp->recv_cqn = c->cq_a;
	return rv_create_qp(c->fd, qp) ||
	       rv_modify_qp(c->fd, qp->qpn, RNIC_QPS_INIT, 0, 0, 0, 0, 0) ? -1 : 0;
}

/* Driver-side validation (the uAPI's errors), QP recycling and stale keys. */
static int sc_driver_checks(struct chk *c)
{
	struct rnic_send_wr wrs[17];
	struct rnic_post post = { .qpn = c->qp_a, .num_wr = 1, .wrs = (uintptr_t)wrs };
	struct rnic_create_qp qp;
	struct rnic_alloc_pd pd = { .pd = c->pd };
	struct rnic_create_cq cq = { .cqn = c->cq_a };
	struct rnic_reg_mr mr;
	struct rnic_wc wc;
	uint32_t i, old_rkey;
	int n;

	/* A QP in INIT cannot send. */
	if (create_init_qp(c, &qp))
		return -1;
	write_wr(c, &wrs[0], 1, RNIC_WQE_OP_RDMA_WRITE, 64, (uintptr_t)c->dst, c->dst_mr.rkey,
		 c->src_mr.lkey);
	post.qpn = qp.qpn;
	expect("post_send_in_init", c->fd, RNIC_IOCTL_POST_SEND, &post);
	expect("illegal_init_to_rts", c->fd, RNIC_IOCTL_MODIFY_QP,
	       &(struct rnic_modify_qp){ .qpn = qp.qpn, .qp_state = RNIC_QPS_RTS });
	expect("rtr_without_dest", c->fd, RNIC_IOCTL_MODIFY_QP,
	       &(struct rnic_modify_qp){ .qpn = qp.qpn, .qp_state = RNIC_QPS_RTR });
	expect("bad_qp_access", c->fd, RNIC_IOCTL_MODIFY_QP,
	       &(struct rnic_modify_qp){ .qpn = qp.qpn, .qp_state = RNIC_QPS_INIT,
					 .attr_mask = RNIC_QP_ATTR_ACCESS, .access = 0x80 });

	/* Objects in use. */
	expect("dealloc_pd_in_use", c->fd, RNIC_IOCTL_DEALLOC_PD, &pd);
	expect("destroy_cq_in_use", c->fd, RNIC_IOCTL_DESTROY_CQ, &cq);
	expect("destroy_unknown_qp", c->fd, RNIC_IOCTL_DESTROY_QP,
	       &(struct rnic_create_qp){ .qpn = 12345 });

	/* Malformed WRs on an RTS QP (c->qp_a has max_send_sge 2, 16 slots, inline 0..). */
	post.qpn = c->qp_a;
	wrs[0].num_sge = RNIC_UAPI_MAX_SGE;
	expect("too_many_sges", c->fd, RNIC_IOCTL_POST_SEND, &post);
	wrs[0].num_sge = 1;
	wrs[0].opcode = 0x9;
	expect("bad_opcode", c->fd, RNIC_IOCTL_POST_SEND, &post);
	wrs[0].opcode = RNIC_WQE_OP_RDMA_WRITE;
	wrs[0].flags |= RNIC_WQE_FLAG_INLINE;
	wrs[0].num_sge = 0;
	wrs[0].inline_len = RNIC_UAPI_MAX_INLINE + 1;
	wrs[0].inline_data = (uintptr_t)c->src;
	expect("inline_too_long", c->fd, RNIC_IOCTL_POST_SEND, &post);
	expect("bad_poll_count", c->fd, RNIC_IOCTL_POLL_CQ,
	       &(struct rnic_poll_cq){ .cqn = c->cq_a, .num_entries = 0 });
	memset(&mr, 0, sizeof(mr));
	mr.addr = (uintptr_t)c->src;
	mr.length = RNIC_UAPI_MAX_MR_SIZE + 1;
	mr.pd = c->pd;
	expect("reg_mr_too_big", c->fd, RNIC_IOCTL_REG_MR, &mr);

	/* A full send queue: 17 unsignaled WRITEs into 16 slots. */
	for (i = 0; i < 17; i++) {
		write_wr(c, &wrs[i], 10 + i, RNIC_WQE_OP_RDMA_WRITE, 64, (uintptr_t)c->dst,
			 c->dst_mr.rkey, c->src_mr.lkey);
		wrs[i].flags = i == 15 ? RNIC_WQE_FLAG_SIGNALED : 0;
	}
	post.num_wr = 17;
	expect("post_17_into_16", c->fd, RNIC_IOCTL_POST_SEND, &post);
	printf("num_posted: %u\n", post.num_posted);
	n = rv_poll_cq(c->fd, c->cq_a, &wc, 1, CHK_TIMEOUT_MS);
	printf("ring_drained: %d\n", n == 1 && wc.wr_id == 25 && wc.status == RNIC_WC_SUCCESS);
	post.num_wr = 1;
	wrs[0].flags = RNIC_WQE_FLAG_SIGNALED;
	n = rv_post_send(c->fd, c->qp_a, wrs, 1) == 0 &&
	    rv_poll_cq(c->fd, c->cq_a, &wc, 1, CHK_TIMEOUT_MS) == 1 &&
	    wc.status == RNIC_WC_SUCCESS;
	printf("post_after_drain: %d\n", n);

	/* Stale rkey after DEREG + REG of the same index: the generation differs. */
	old_rkey = c->dst_mr.rkey;
	expect("dereg_mr", c->fd, RNIC_IOCTL_DEREG_MR,
	       &(struct rnic_reg_mr){ .index = c->dst_mr.index });
	if (rv_reg_mr(c->fd, c->pd, c->dst, CHK_BUF, ACC_ALL, &c->dst_mr))
		return -1;
	printf("same_index: %d\n", (old_rkey >> 8) == (c->dst_mr.rkey >> 8));
	printf("new_key_differs: %d\n", old_rkey != c->dst_mr.rkey);
	write_wr(c, &wrs[0], 40, RNIC_WQE_OP_RDMA_WRITE, 64, (uintptr_t)c->dst, old_rkey,
		 c->src_mr.lkey);
	if (rv_post_send(c->fd, c->qp_a, wrs, 1) || poll_one(c, c->cq_a, &wc, "stale rkey"))
		return -1;
	printf("stale_rkey_status: %s\n", rv_wc_status_name(wc.status));

	/* Recycle the errored QP: ERR -> RESET -> INIT -> RTR -> RTS, then a WRITE works. */
	memset(c->dst, 0, CHK_LEN);
	if (rv_modify_qp(c->fd, c->qp_a, RNIC_QPS_RESET, 0, 0, 0, 0, 0) ||
	    rv_connect_qp(c->fd, c->qp_a, c->qp_b, QP_ACC, 7, 100))
		return -1;
	write_wr(c, &wrs[0], 41, RNIC_WQE_OP_RDMA_WRITE, CHK_LEN, (uintptr_t)c->dst,
		 c->dst_mr.rkey, c->src_mr.lkey);
	if (rv_post_send(c->fd, c->qp_a, wrs, 1) || poll_one(c, c->cq_a, &wc, "after recycle"))
		return -1;
	printf("recycled_status: %s\n", rv_wc_status_name(wc.status));
	printf("recycled_wr_id_ok: %d\n", wc.wr_id == 41);
	printf("recycled_data_ok: %d\n", memcmp(c->dst, c->src, CHK_LEN) == 0);
	n = rv_poll_cq(c->fd, c->cq_a, &wc, 1, 0);
	printf("extra_completions: %d\n", n);
	return print_qp(c, "", c->qp_a);
}

/*
 * MODIFY_QP's remote attributes (docs/fabric.md): each bad value and each attribute on an
 * edge that does not take it is -EINVAL; then a loopback pair (dest_ip 0) connected with
 * explicit PSNs, path MTU 1024, retry_cnt 3 and timeout 10 still moves data.
 */
static int sc_remote_attrs(struct chk *c)
{
	struct rnic_create_qp qp;
	struct rnic_send_wr wr;
	struct rnic_wc wc;
	char ip[16];
	uint32_t rtr = RNIC_QP_ATTR_DEST_QPN;

	printf("ipv4: %s\n", rv_ipv4_str(c->q.ipv4, ip));
	printf("node: %d\n", c->q.node == RNIC_NODE_UNKNOWN ? -1 : (int)c->q.node);
	if (create_init_qp(c, &qp))
		return -1;
#define RTR_WITH(key, mask, field, value)						\
	expect(key, c->fd, RNIC_IOCTL_MODIFY_QP,					\
	       &(struct rnic_modify_qp){ .qpn = qp.qpn, .qp_state = RNIC_QPS_RTR,	\
					 .attr_mask = rtr | (mask), .dest_qpn = c->qp_b,	\
					 .field = (value) })
	RTR_WITH("dest_ip_multicast", RNIC_QP_ATTR_DEST_IP, dest_ip, 0xe0000001);
	RTR_WITH("dest_ip_broadcast", RNIC_QP_ATTR_DEST_IP, dest_ip, 0xffffffff);
	RTR_WITH("dest_ip_zero_net", RNIC_QP_ATTR_DEST_IP, dest_ip, 0x00010203);
	RTR_WITH("rq_psn_25_bits", RNIC_QP_ATTR_RQ_PSN, rq_psn, 0x1000000);
	RTR_WITH("path_mtu_1000", RNIC_QP_ATTR_PATH_MTU, path_mtu, 1000);
	RTR_WITH("path_mtu_128", RNIC_QP_ATTR_PATH_MTU, path_mtu, 128);
	RTR_WITH("path_mtu_8192", RNIC_QP_ATTR_PATH_MTU, path_mtu, 8192);
	RTR_WITH("sq_psn_at_rtr", RNIC_QP_ATTR_SQ_PSN, sq_psn, 1);
	RTR_WITH("retry_cnt_at_rtr", RNIC_QP_ATTR_RETRY_CNT, retry_cnt, 1);
	RTR_WITH("timeout_at_rtr", RNIC_QP_ATTR_TIMEOUT, timeout, 1);
	/* READs and atomics outstanding (minor 12): 1..16, each on its own edge, with its bit. */
	RTR_WITH("max_dest_rd_atomic_17", RNIC_QP_ATTR_MAX_DEST_RD_ATOMIC, rd_atomic, 17 << 8);
	RTR_WITH("max_dest_rd_atomic_0", RNIC_QP_ATTR_MAX_DEST_RD_ATOMIC, rd_atomic, 0);
	RTR_WITH("rd_atomic_without_its_bit", 0, rd_atomic, 4 << 8);
	RTR_WITH("max_rd_atomic_at_rtr", RNIC_QP_ATTR_MAX_RD_ATOMIC, rd_atomic, 4);
#undef RTR_WITH
	expect("rtr_remote_ok", c->fd, RNIC_IOCTL_MODIFY_QP,
	       &(struct rnic_modify_qp){ .qpn = qp.qpn, .qp_state = RNIC_QPS_RTR,
					 .attr_mask = rtr | RNIC_QP_ATTR_DEST_IP |
						      RNIC_QP_ATTR_RQ_PSN | RNIC_QP_ATTR_PATH_MTU,
					 .dest_qpn = c->qp_b, .dest_ip = 0x7f00000c,
					 .rq_psn = 0xabcdef, .path_mtu = 512 });
#define RTS_WITH(key, mask, field, value)						\
	expect(key, c->fd, RNIC_IOCTL_MODIFY_QP,					\
	       &(struct rnic_modify_qp){ .qpn = qp.qpn, .qp_state = RNIC_QPS_RTS,	\
					 .attr_mask = (mask), .field = (value) })
	RTS_WITH("sq_psn_25_bits", RNIC_QP_ATTR_SQ_PSN, sq_psn, 0x1000000);
	RTS_WITH("retry_cnt_8", RNIC_QP_ATTR_RETRY_CNT, retry_cnt, 8);
	RTS_WITH("timeout_32", RNIC_QP_ATTR_TIMEOUT, timeout, 32);
	RTS_WITH("dest_ip_at_rts", RNIC_QP_ATTR_DEST_IP, dest_ip, 0x7f00000c);
	RTS_WITH("path_mtu_at_rts", RNIC_QP_ATTR_PATH_MTU, path_mtu, 1024);
	RTS_WITH("unknown_attr_bit", 0x800, rd_atomic, 0);
	RTS_WITH("rts_remote_ok", RNIC_QP_ATTR_SQ_PSN | RNIC_QP_ATTR_RETRY_CNT |
		 RNIC_QP_ATTR_TIMEOUT, sq_psn, 0x123456);
#undef RTS_WITH
	print_qp(c, "remote_", qp.qpn);
	if (rv_ioctl(c->fd, RNIC_IOCTL_DESTROY_QP, &qp, "DESTROY_QP"))
		return -1;

	/* The loopback pair again, with explicit remote attributes and dest_ip 0. */
	if (rv_modify_qp(c->fd, c->qp_a, RNIC_QPS_RESET, 0, 0, 0, 0, 0) ||
	    rv_modify_qp(c->fd, c->qp_b, RNIC_QPS_RESET, 0, 0, 0, 0, 0))
		return -1;
	{
		struct rv_remote_attr a = {
			.dest_qpn = c->qp_b, .dest_ip = 0, .rq_psn = 0x10, .sq_psn = 0x20,
			.path_mtu = 1024, .retry_cnt = 3, .timeout = 10, .rnr_retry = 7,
			.rnr_timer_us = 10,
		};

		if (rv_modify_qp(c->fd, c->qp_a, RNIC_QPS_INIT, RNIC_QP_ATTR_ACCESS, 0, QP_ACC,
				 0, 0) ||
		    rv_modify_qp(c->fd, c->qp_b, RNIC_QPS_INIT, RNIC_QP_ATTR_ACCESS, 0, QP_ACC,
				 0, 0) ||
		    rv_connect_qp_remote(c->fd, c->qp_a, &a))
			return -1;
		a.dest_qpn = c->qp_a;
		a.rq_psn = 0x20;
		a.sq_psn = 0x10;
		if (rv_connect_qp_remote(c->fd, c->qp_b, &a))
			return -1;
	}
	memset(c->dst, 0, CHK_LEN);
	write_wr(c, &wr, 7, RNIC_WQE_OP_RDMA_WRITE, CHK_LEN, (uintptr_t)c->dst, c->dst_mr.rkey,
		 c->src_mr.lkey);
	if (rv_post_send(c->fd, c->qp_a, &wr, 1) || poll_one(c, c->cq_a, &wc, "loopback write"))
		return -1;
	printf("loopback_status: %s\n", rv_wc_status_name(wc.status));
	printf("loopback_data_ok: %d\n", memcmp(c->dst, c->src, CHK_LEN) == 0);
	return print_qp(c, "", c->qp_a);
}

/* POLL_CQ with a timeout and nothing to complete: sleeps, then returns no completion. */
static int sc_wait_timeout(struct chk *c)
{
	struct rnic_wc wc;
	uint64_t t0 = rv_now_ns();
	int n = rv_poll_cq(c->fd, c->cq_a, &wc, 1, 3000);

	if (n < 0)
		return -1;
	printf("completions: %d\n", n);
	printf("elapsed_ms: %llu\n", (unsigned long long)((rv_now_ns() - t0) / 1000000));
	return 0;
}

/*
 * Writes "slot addr" to the RNIC's debugfs file rnic_emu-<PCI name>/bar1_aperture (a test
 * path of the driver, not an interface); 0 or -1.
 */
static int set_aperture(struct chk *c, unsigned int slot, unsigned long long addr)
{
	char path[PATH_MAX + 64], dev[PATH_MAX];
	const char *bdf;
	FILE *f;
	int ret;

	rv_dev_sysfs(c->dev, path, sizeof(path));
	if (!realpath(path, dev)) {
		printf("error: %s: %s\n", path, strerror(errno));
		return -1;
	}
	bdf = strrchr(dev, '/') ? strrchr(dev, '/') + 1 : dev;
	snprintf(path, sizeof(path), "/sys/kernel/debug/rnic_emu-%s/bar1_aperture", bdf);
	f = fopen(path, "w");
	if (!f) {
		printf("error: open %s: %s\n", path, strerror(errno));
		return -1;
	}
	ret = fprintf(f, "%u 0x%llx\n", slot, addr) < 0;
	ret |= fclose(f) != 0;
	if (ret)
		printf("error: write %s: %s\n", path, strerror(errno));
	return ret ? -1 : 0;
}

/* The slot holding addr (from bar1_aperture), or -1. */
static int find_aperture(struct chk *c, unsigned long long addr)
{
	char path[160], line[96];
	unsigned long long v;
	unsigned int slot;
	int found = -1;
	FILE *f;

	rv_dev_sysfs(c->dev, path, sizeof(path) - 16);
	strcat(path, "/bar1_aperture");
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "slot%u %llx", &slot, &v) == 2 && v == addr && found < 0)
			found = (int)slot;
	fclose(f);
	return found;
}

/*
 * A WRITE into GPU memory through its P2P MR works while the GPU's BAR1 is in a
 * BAR1_APERTURE slot, and fails (FATAL_ERR / APERTURE) once the slot is cleared.
 */
static int sc_aperture(struct chk *c)
{
	char stats[160];
	unsigned long long err0 = 0, err1 = 0;
	struct rnic_send_wr wr;
	struct rv_mr gmr;
	struct rnic_wc wc;
	struct rv_gpu g;
	uint8_t *gbuf;
	int slot, ret = -1;

	if (rv_gpu_open(0, &g))
		return -1;
	gbuf = rv_gpu_alloc(&g, CHK_BUF);
	if (!gbuf || rv_reg_mr(c->fd, c->pd, gbuf, CHK_BUF, ACC_ALL, &gmr))
		goto out;
	printf("gpu: %s\n", g.pci);
	printf("gpu_mr_path: %s\n", rv_mr_path_name(gmr.path));
	slot = find_aperture(c, g.q.bar1_bus_addr);
	printf("slot: %d\n", slot);
	if (slot < 0) {
		printf("error: GPU BAR1 0x%llx is in no BAR1_APERTURE slot\n",
		       (unsigned long long)g.q.bar1_bus_addr);
		goto out;
	}

	/* With the slot in place. */
	memset(gbuf, 0, CHK_LEN);
	write_wr(c, &wr, 1, RNIC_WQE_OP_RDMA_WRITE, CHK_LEN, (uintptr_t)gbuf, gmr.rkey,
		 c->src_mr.lkey);
	if (rv_post_send(c->fd, c->qp_a, &wr, 1) || poll_one(c, c->cq_a, &wc, "WRITE to GPU"))
		goto out;
	rv_mr_sync(c->fd, &gmr, 0, CHK_LEN, RNIC_MR_SYNC_FROM_BOUNCE);
	printf("before_status: %s\n", rv_wc_status_name(wc.status));
	printf("before_data_ok: %d\n", memcmp(gbuf, c->src, CHK_LEN) == 0);

	/* Slot cleared: the device must refuse the peer-to-peer DMA. */
	rv_dev_sysfs(c->dev, stats, sizeof(stats) - 8);
	strcat(stats, "/stats");
	rv_read_stat(stats, "aperture_errors", &err0);
	if (set_aperture(c, (unsigned int)slot, 0))
		goto out;
	memset(gbuf, 0, CHK_LEN);
	write_wr(c, &wr, 2, RNIC_WQE_OP_RDMA_WRITE, CHK_LEN, (uintptr_t)gbuf, gmr.rkey,
		 c->src_mr.lkey);
	if (rv_post_send(c->fd, c->qp_a, &wr, 1) || poll_one(c, c->cq_a, &wc, "WRITE without aperture"))
		goto restore;
	print_wc("", &wc);
	rv_read_stat(stats, "aperture_errors", &err1);
	printf("aperture_errors: %llu\n", err1 - err0);
	printf("gpu_untouched: %d\n", gbuf[0] == 0 && !memcmp(gbuf, gbuf + 1, CHK_LEN - 1));
	ret = print_qp(c, "", c->qp_a);
restore:
	if (set_aperture(c, (unsigned int)slot, g.q.bar1_bus_addr))
		ret = -1;
	else
		printf("restored: %d\n", find_aperture(c, g.q.bar1_bus_addr) == slot);
out:
	close(g.fd);
	return ret;
}

/*
 * Teardown quiescence (docs/programming.md R-RST-4): a burst of WRITEs into dst, then at
 * once DESTROY_QP of the requester and DEREG_MR of the destination. From the moment those
 * calls return the device must not write dst: it is poisoned and watched for 300 ms, and
 * a WRITE from QP B, whose peer QP A is gone, must fail (REM_OP_ERR) without touching it.
 */
static int sc_teardown_poison(struct chk *c)
{
	struct rnic_send_wr wrs[8];
	struct rnic_create_qp qp = { .qpn = c->qp_a };
	struct rnic_reg_mr mr = { .index = c->dst_mr.index };
	struct rnic_wc wc;
	size_t i, bad = 0;

	for (i = 0; i < 8; i++) {
		write_wr(c, &wrs[i], 10 + i, RNIC_WQE_OP_RDMA_WRITE, CHK_LEN,
			 (uintptr_t)c->dst + i * CHK_LEN, c->dst_mr.rkey, c->src_mr.lkey);
		wrs[i].flags = 0;
		wrs[i].sge[0].addr = (uintptr_t)c->src + i * CHK_LEN;
	}
	if (rv_post_send(c->fd, c->qp_a, wrs, 8) ||
	    rv_ioctl(c->fd, RNIC_IOCTL_DESTROY_QP, &qp, "DESTROY_QP") ||
	    rv_ioctl(c->fd, RNIC_IOCTL_DEREG_MR, &mr, "DEREG_MR"))
		return -1;
	memset(c->dst, 0x5a, CHK_BUF);
	/* QP B is still connected to the destroyed QP A's number. */
	write_wr(c, &wrs[0], 99, RNIC_WQE_OP_RDMA_WRITE, CHK_LEN, (uintptr_t)c->dst,
		 c->dst_mr.rkey, c->src_mr.lkey);
	if (rv_post_send(c->fd, c->qp_b, wrs, 1) || poll_one(c, c->cq_b, &wc, "the WRITE to a destroyed QP"))
		return -1;
	printf("stale_status: %s\n", rv_wc_status_name(wc.status));
	usleep(300 * 1000);
	for (i = 0; i < CHK_BUF; i++)
		bad += c->dst[i] != 0x5a;
	printf("bytes_changed: %zu\n", bad);
	printf("untouched: %d\n", bad == 0);
	return 0;
}

struct scenario {
	const char *name;
	int (*run)(struct chk *c);
	uint32_t dst_access;
	uint32_t rnr_retry;
	const char *help;
	bool not_in_all;		/* needs a GPU: only by name */
};

static const struct scenario scenarios[] = {
	{ "rkey-error", sc_rkey_error, ACC_ALL, 7,
	  "WRITE with a stale rkey: REM_ACCESS_ERR, QP ERR, next WR flushed", false },
	{ "access-error", sc_access_error, RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_READ, 7,
	  "WRITE to an MR without REMOTE_WRITE: REM_ACCESS_ERR", false },
	{ "range-error", sc_range_error, ACC_ALL, 7,
	  "WRITE past the end of the remote MR: REM_ACCESS_ERR", false },
	{ "lkey-error", sc_lkey_error, ACC_ALL, 7, "WRITE with a bad lkey: LOC_PROT_ERR", false },
	{ "rnr", sc_rnr, ACC_ALL, 1, "SEND with no RECV, rnr_retry 1: RNR_RETRY_EXC_ERR", false },
	{ "send-too-long", sc_send_too_long, ACC_ALL, 7,
	  "SEND longer than the RECV: REM_INV_REQ_ERR / LOC_LEN_ERR", false },
	{ "flush", sc_flush, ACC_ALL, 7, "5 RECVs, QP to ERR: 5 x WR_FLUSH_ERR in order", false },
	{ "write-imm", sc_write_imm, ACC_ALL, 7,
	  "WRITE_WITH_IMM 0x12345678: RECV_RDMA_WITH_IMM, imm, byte_len, data", false },
	{ "driver-checks", sc_driver_checks, ACC_ALL, 7,
	  "driver-side errors (-EINVAL/-EBUSY/-ENOMEM), stale keys, QP recycling", false },
	{ "remote-attrs", sc_remote_attrs, ACC_ALL, 7,
	  "MODIFY_QP remote attributes: bad values -EINVAL, loopback with PSNs/MTU/retry works",
	  false },
	{ "wait-timeout", sc_wait_timeout, ACC_ALL, 7,
	  "POLL_CQ with timeout_ms 3000 on an idle CQ: 0 completions after ~3 s", false },
	{ "teardown-poison", sc_teardown_poison, ACC_ALL, 7,
	  "WRITEs, DESTROY_QP + DEREG_MR at once, dst poisoned: never written again", false },
	{ "aperture", sc_aperture, ACC_ALL, 7,
	  "WRITE into GPU 0 memory, then with its BAR1_APERTURE slot cleared: FATAL_ERR / APERTURE (not in all)",
	  true },
};

static void usage(FILE *f)
{
	size_t i;

	fprintf(f, "usage: rnic-verbs-check [-d DEV] SCENARIO|all\n");
	for (i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
		fprintf(f, "  %-14s %s\n", scenarios[i].name, scenarios[i].help);
	fprintf(f, "Exit status: 0 the scenario ran (judge the printed values), 1 it could not run, 2 usage.\n");
}

static int run_one(const struct scenario *s, const char *dev)
{
	struct chk c;
	int ret;

	printf("scenario: %s\n", s->name);
	ret = setup(&c, dev, s->dst_access, s->rnr_retry);
	if (!ret)
		ret = s->run(&c);
	teardown(&c);
	printf("ran: %d\n", ret == 0);
	fflush(stdout);
	return ret ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *dev = RV_DEFAULT_DEV, *name;
	int argi = 1, ret = 0;
	size_t i;

	if (argc >= 3 && !strcmp(argv[1], "-d")) {
		dev = argv[2];
		argi = 3;
	}
	if (argi != argc - 1) {
		usage(stderr);
		return 2;
	}
	name = argv[argi];
	if (!strcmp(name, "help") || !strcmp(name, "-h") || !strcmp(name, "--help")) {
		usage(stdout);
		return 0;
	}
	for (i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
		if (!strcmp(name, "all")) {
			if (scenarios[i].not_in_all)
				continue;
			ret |= run_one(&scenarios[i], dev);
			printf("\n");
		} else if (!strcmp(name, scenarios[i].name)) {
			return run_one(&scenarios[i], dev);
		}
	}
	if (strcmp(name, "all")) {
		fprintf(stderr, "rnic-verbs-check: unknown scenario '%s'\n", name);
		usage(stderr);
		return 2;
	}
	return ret;
}
