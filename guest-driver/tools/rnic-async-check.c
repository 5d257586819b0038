// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-async-check: the asynchronous events of rnic0 as libibverbs delivers them
 * (ibv_get_async_event; docs/verbs.md §9, docs/ibverbs.md). Built against libibverbs by
 * images/build.sh, like rnic-dmabuf-check. One guest, QPs connected to each other through
 * the port's own RoCE v2 GID:
 *
 *   comm_est  QP B in RTR receives a SEND from QP A: IBV_EVENT_COMM_EST for B
 *   access    A RDMA-WRITEs to B with a wrong rkey: A completes with REM_ACCESS_ERR,
 *             B gets IBV_EVENT_QP_ACCESS_ERR and is in ERROR
 *   cq        C's send CQ is too small for the signaled WRITEs posted (never polled):
 *             IBV_EVENT_CQ_ERR for the CQ, IBV_EVENT_QP_FATAL for C
 *   srq       (a device of contract 1.15) F receives from an SRQ holding 4 RECVs with its
 *             limit armed at 3: after E's second SEND 2 are left, IBV_EVENT_SRQ_LIMIT_REACHED
 *             for the SRQ, whose limit then reads 0; F moved to ERROR gets
 *             IBV_EVENT_QP_LAST_WQE_REACHED
 *   port      `ip link set NETDEV down`, then up: IBV_EVENT_PORT_ERR, IBV_EVENT_PORT_ACTIVE
 *
 * Usage: rnic-async-check [NETDEV]   (default reth0; the port scenario changes its state
 * and leaves it up). Each scenario prints "async-<scenario>: ok" or "async-<scenario>:
 * FAIL <why>", and every event seen as "async-event: <name> <object>"; exit status 0 when
 * all passed. An event must arrive within EVENT_MS.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEV_NAME	"rnic0"
#define GID_INDEX	1		/* RoCE v2 ::ffff:<node address> (docs/ibverbs.md) */
#define EVENT_MS	30000
#define BUF		4096

struct qp {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;

static int fail(const char *scenario, const char *why)
{
	printf("async-%s: FAIL %s (%s)\n", scenario, why, strerror(errno));
	return 1;
}

static struct qp make_qp(struct ibv_cq *cq)
{
	struct qp q = { .cq = cq };
	struct ibv_qp_init_attr init = {
		.qp_type = IBV_QPT_RC, .send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE,
	};

	if (!cq)
		return q;
	q.qp = ibv_create_qp(pd, &init);
	if (q.qp && ibv_modify_qp(q.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				  IBV_QP_ACCESS_FLAGS)) {
		ibv_destroy_qp(q.qp);
		q.qp = NULL;
	}
	return q;
}

static int to_rtr(struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = gid, .sgid_index = GID_INDEX, .hop_limit = 64 } },
	};

	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			     IBV_QP_MIN_RNR_TIMER);
}

static int to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
		.max_rd_atomic = 1,
	};

	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* x -> RTR -> RTS towards y, and y -> RTR (-> RTS unless rtr_only) towards x. */
static int qp_connect(struct ibv_qp *x, struct ibv_qp *y, int rtr_only)
{
	if (to_rtr(x, y->qp_num) || to_rts(x) || to_rtr(y, x->qp_num))
		return -1;
	return rtr_only ? 0 : to_rts(y);
}

/* One completion of cq within EVENT_MS; its status, or -1. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	int i, n;

	for (i = 0; i < EVENT_MS; i++) {
		n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n < 0 ? -1 : (int)wc->status;
		usleep(1000);
	}
	return -1;
}

/*
 * Waits for event `want` about `obj` (a QP, a CQ, or NULL for a port event); prints every
 * event seen. 0 when it came.
 */
static int wait_event(enum ibv_event_type want, const void *obj)
{
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev;
	int found = 0;

	while (!found) {
		const void *what;

		if (poll(&p, 1, EVENT_MS) <= 0)
			return -1;
		if (ibv_get_async_event(ctx, &ev))
			return -1;
		bool srq = ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED ||
			   ev.event_type == IBV_EVENT_SRQ_ERR;

		what = ev.event_type == IBV_EVENT_CQ_ERR ? (const void *)ev.element.cq :
		       srq ? (const void *)ev.element.srq :
		       ev.event_type == IBV_EVENT_PORT_ACTIVE || ev.event_type == IBV_EVENT_PORT_ERR ||
		       ev.event_type == IBV_EVENT_GID_CHANGE ? NULL : (const void *)ev.element.qp;
		printf("async-event: %s %u\n", ibv_event_type_str(ev.event_type),
		       ev.event_type == IBV_EVENT_CQ_ERR || srq ? 0 :
		       what ? ev.element.qp->qp_num : (unsigned int)ev.element.port_num);
		found = ev.event_type == want && what == obj;
		ibv_ack_async_event(&ev);
	}
	return 0;
}

static int qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr a;

	return ibv_query_qp(qp, &a, IBV_QP_STATE, &init) ? -1 : (int)a.qp_state;
}

static int comm_est_and_access(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct qp a = make_qp(cq), b = make_qp(cq);
	char *buf = calloc(1, 2 * BUF);
	struct ibv_mr *mr = buf ? ibv_reg_mr(pd, buf, 2 * BUF, IBV_ACCESS_LOCAL_WRITE |
					     IBV_ACCESS_REMOTE_WRITE) : NULL;
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr ? mr->lkey : 0 };
	struct ibv_sge r = { .addr = (uintptr_t)buf + BUF, .length = BUF, .lkey = s.lkey };
	struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = &r, .num_sge = 1 }, *rbad;
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;
	int rc = 0;

	if (!a.qp || !b.qp || !mr || qp_connect(a.qp, b.qp, 1))
		return fail("comm_est", "setting up two QPs, B in RTR");
	if (ibv_post_recv(b.qp, &rwr, &rbad) || ibv_post_send(a.qp, &wr, &bad))
		return fail("comm_est", "posting");
	if (poll_one(cq, &wc) != IBV_WC_SUCCESS || poll_one(cq, &wc) != IBV_WC_SUCCESS)
		return fail("comm_est", "the SEND and its RECV did not both complete");
	if (wait_event(IBV_EVENT_COMM_EST, b.qp))
		rc |= fail("comm_est", "no IBV_EVENT_COMM_EST for the QP in RTR");
	else
		printf("async-comm_est: ok\n");

	if (to_rts(b.qp))
		return rc | fail("access", "B to RTS");
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = (uintptr_t)buf + BUF;
	wr.wr.rdma.rkey = mr->rkey ^ 0x80;	/* another key of the same MR index */
	if (ibv_post_send(a.qp, &wr, &bad))
		return rc | fail("access", "posting the WRITE");
	if (poll_one(cq, &wc) != IBV_WC_REM_ACCESS_ERR)
		rc |= fail("access", "the WRITE did not complete with REM_ACCESS_ERR");
	else if (wait_event(IBV_EVENT_QP_ACCESS_ERR, b.qp))
		rc |= fail("access", "no IBV_EVENT_QP_ACCESS_ERR for the responder");
	else if (qp_state(b.qp) != IBV_QPS_ERR)
		rc |= fail("access", "the responder is not in ERROR");
	else
		printf("async-access: ok\n");
	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(b.qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	free(buf);
	return rc;
}

static int cq_overflow(void)
{
	struct ibv_cq *small = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	struct ibv_cq *big = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct qp c = make_qp(small), d = make_qp(big);
	char *buf = calloc(1, BUF);
	struct ibv_mr *mr = buf ? ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE |
					     IBV_ACCESS_REMOTE_WRITE) : NULL;
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr ? mr->lkey : 0 };
	struct ibv_send_wr wr = { .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	int i, rc = 0;

	if (!c.qp || !d.qp || !mr || qp_connect(c.qp, d.qp, 0))
		return fail("cq", "setting up the QPs");
	wr.wr.rdma.remote_addr = (uintptr_t)buf;
	wr.wr.rdma.rkey = mr->rkey;
	/* One more signaled WRITE than the CQ holds (the provider may round its size up). */
	for (i = 0; i <= small->cqe && i < 16; i++) {
		wr.wr_id = i;
		if (ibv_post_send(c.qp, &wr, &bad))
			return fail("cq", "posting");
	}
	printf("async-cq-size: %d, %d WRITEs\n", small->cqe, i);
	if (wait_event(IBV_EVENT_CQ_ERR, small))
		rc |= fail("cq", "no IBV_EVENT_CQ_ERR");
	else if (wait_event(IBV_EVENT_QP_FATAL, c.qp))
		rc |= fail("cq", "no IBV_EVENT_QP_FATAL for the QP of the CQ");
	else
		printf("async-cq: ok\n");
	ibv_destroy_qp(c.qp);
	ibv_destroy_qp(d.qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(small);
	ibv_destroy_cq(big);
	free(buf);
	return rc;
}

static int srq_events(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = cq ? ibv_create_srq(pd, &sa) : NULL;
	struct ibv_qp_init_attr init = {
		.qp_type = IBV_QPT_RC, .send_cq = cq, .recv_cq = cq, .srq = srq,
		.cap = { .max_send_wr = 4, .max_send_sge = 1 },
	};
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE,
	};
	struct qp e = make_qp(cq);
	struct ibv_qp *f = srq ? ibv_create_qp(pd, &init) : NULL;
	char *buf = calloc(1, 5 * BUF);
	struct ibv_mr *mr = buf ? ibv_reg_mr(pd, buf, 5 * BUF, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr ? mr->lkey : 0 };
	struct ibv_send_wr wr = { .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_srq_attr limit = { .srq_limit = 3 }, q;
	struct ibv_wc wc;
	int i, rc = 0;

	if (!srq) {
		printf("async-srq: skipped, no SRQ (%s)\n", strerror(errno));
		return 0;
	}
	if (!e.qp || !f || !mr ||
	    ibv_modify_qp(f, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS) || qp_connect(e.qp, f, 0))
		return fail("srq", "setting up the SRQ and two QPs, F on it");
	for (i = 1; i <= 4; i++) {
		struct ibv_sge r = { .addr = (uintptr_t)buf + i * BUF, .length = BUF, .lkey = mr->lkey };
		struct ibv_recv_wr rwr = { .wr_id = 100 + i, .sg_list = &r, .num_sge = 1 }, *rbad;

		if (ibv_post_srq_recv(srq, &rwr, &rbad))
			return fail("srq", "posting to the SRQ");
	}
	if (ibv_modify_srq(srq, &limit, IBV_SRQ_LIMIT) || ibv_query_srq(srq, &q) ||
	    q.srq_limit != 3)
		return fail("srq", "arming the limit at 3");
	for (i = 0; i < 2; i++) {
		wr.wr_id = i;
		if (ibv_post_send(e.qp, &wr, &bad) || poll_one(cq, &wc) != IBV_WC_SUCCESS ||
		    poll_one(cq, &wc) != IBV_WC_SUCCESS)
			return fail("srq", "a SEND into the SRQ's WQEs");
	}
	if (wait_event(IBV_EVENT_SRQ_LIMIT_REACHED, srq))
		rc |= fail("srq", "no IBV_EVENT_SRQ_LIMIT_REACHED with 2 WQEs left");
	else if (ibv_query_srq(srq, &q) || q.srq_limit != 0)
		rc |= fail("srq", "the limit still armed after its event");
	a.qp_state = IBV_QPS_ERR;
	if (!rc && ibv_modify_qp(f, &a, IBV_QP_STATE))
		rc |= fail("srq", "F to ERROR");
	else if (!rc && wait_event(IBV_EVENT_QP_LAST_WQE_REACHED, f))
		rc |= fail("srq", "no IBV_EVENT_QP_LAST_WQE_REACHED for F in ERROR");
	else if (!rc)
		printf("async-srq: ok\n");
	ibv_destroy_qp(e.qp);
	ibv_destroy_qp(f);
	ibv_destroy_srq(srq);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	free(buf);
	return rc;
}

static int port_events(const char *netdev)
{
	char cmd[96];

	snprintf(cmd, sizeof(cmd), "ip link set dev %s down", netdev);
	if (system(cmd))
		return fail("port", cmd);
	if (wait_event(IBV_EVENT_PORT_ERR, NULL))
		return fail("port", "no IBV_EVENT_PORT_ERR");
	snprintf(cmd, sizeof(cmd), "ip link set dev %s up", netdev);
	if (system(cmd))
		return fail("port", cmd);
	if (wait_event(IBV_EVENT_PORT_ACTIVE, NULL))
		return fail("port", "no IBV_EVENT_PORT_ACTIVE");
	printf("async-port: ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	const char *netdev = argc > 1 ? argv[1] : "reth0";
	struct ibv_device **list = ibv_get_device_list(NULL);
	int i, rc = 0;

	for (i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), DEV_NAME))
			ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!ctx)
		return fail("setup", "ibv_open_device " DEV_NAME);
	pd = ibv_alloc_pd(ctx);
	if (!pd || ibv_query_gid(ctx, 1, GID_INDEX, &gid))
		return fail("setup", "PD and GID");
	rc |= comm_est_and_access();
	rc |= cq_overflow();
	rc |= srq_events();
	rc |= port_events(netdev);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("async-result: %s\n", rc ? "FAIL" : "ok");
	return rc;
}
