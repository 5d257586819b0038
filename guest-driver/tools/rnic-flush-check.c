// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-flush-check: IBTA 1.5 RDMA FLUSH and ATOMIC WRITE between two RC QPs of two
 * devices on two nodes (docs/verbs.md §4, docs/fabric.md "Soft-RoCE interop"): any pair of
 * rnic0 and Linux's rxe0, so each side's wire format and rules meet an outside
 * implementation. Built against libibverbs by images/build.sh, like rnic-async-check.
 *
 *   rnic-flush-check -d DEV -x GID_INDEX [-p PORT]                  server: waits for a client
 *   rnic-flush-check -d DEV -x GID_INDEX [-p PORT] [-A|-P] SERVER_ADDR  client
 *
 * The two exchange QP number, PSN, GID and their buffer's address and rkey over TCP. The
 * server's buffer (4 KiB) is registered LOCAL_WRITE | REMOTE_WRITE | FLUSH_GLOBAL, its QP
 * grants REMOTE_WRITE | FLUSH_GLOBAL. The client, through ibv_wr_*:
 *
 *   atomic-write  ATOMIC WRITE of 8 bytes to offset 8: IBV_WC_ATOMIC_WRITE, success
 *   flush-range   RDMA WRITE of 256 bytes to offset 512, then FLUSH (global) of that range
 *   flush-mr      FLUSH (global) of the whole MR, the address and length ignored
 *   persistent    FLUSH to persistence, which the MR does not grant: IBV_WC_REM_ACCESS_ERR
 *                 (the QPs end in ERROR; this runs last)
 *
 * With -P it skips the persistent step: on a lossy link the refusal's NAK can be lost, and
 * the resent FLUSH then meets a responder already in ERROR (another status, by the rules).
 * With -A the client sends no FLUSH (the RDMA WRITE still goes, so the server's check is
 * the same): for a peer whose FLUSH packets do not interoperate. Linux's rxe computes a
 * FLUSH's ICRC over its headers twice (its opcode table gives FLUSH no payload offset),
 * so no IBTA-conforming side accepts rxe's FLUSH or has its own accepted by rxe
 * (docs/fabric.md, "Soft-RoCE interop").
 *
 * The client starts once the server says over TCP that its QP is connected. A request that
 * reaches a QP still in INIT is dropped, and the client's resend would then be the first
 * the server sees: Linux's rxe resends an ATOMIC WRITE (or FLUSH) with a RETH address of 0
 * (its retry path recomputes the address for READ, WRITE and atomics only), which any
 * responder refuses as outside the MR (docs/fabric.md, "Soft-RoCE interop").
 *
 * Between the third and the fourth, the client tells the server over TCP, and the server
 * checks its buffer: the 8 bytes and the 256 bytes where the client put them, nothing
 * else changed; the server's QP stays until the client's last step is done. Each step prints "flush-check: <step> ok" or "flush-check: <step> FAIL
 * <why>"; exit status 0 when every step passed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF		4096
#define AW_OFF		8
#define WR_OFF		512
#define WR_LEN		256
#define POLL_MS		30000
#define AW_VALUE	0x0123456789abcdefULL

/* What each side tells the other (network byte order where it matters: none, same ABI). */
struct info {
	uint32_t qpn;
	uint32_t psn;
	uint64_t addr;
	uint32_t rkey;
	uint32_t pad;
	union ibv_gid gid;
};

static int failures;

static void report(const char *step, const char *why)
{
	if (why) {
		printf("flush-check: %s FAIL %s\n", step, why);
		failures++;
	} else {
		printf("flush-check: %s ok\n", step);
	}
	fflush(stdout);
}

static int full_io(int fd, void *p, size_t n, int writing)
{
	uint8_t *b = p;

	while (n) {
		ssize_t k = writing ? write(fd, b, n) : read(fd, b, n);

		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

/* The TCP connection: a server accepts one client, a client retries for up to a minute. */
static int connect_peer(const char *server, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd, one = 1, i;

	if (!server) {
		int l = socket(AF_INET, SOCK_STREAM, 0);

		sa.sin_addr.s_addr = htonl(INADDR_ANY);
		if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
		    bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 1))
			return -1;
		printf("flush-check: listening on %d\n", port);
		fflush(stdout);
		fd = accept(l, NULL, NULL);
		close(l);
		return fd;
	}
	if (inet_pton(AF_INET, server, &sa.sin_addr) != 1)
		return -1;
	for (i = 0; i < 60; i++) {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd >= 0 && !connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
			return fd;
		if (fd >= 0)
			close(fd);
		sleep(1);
	}
	return -1;
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	int i, n;

	for (i = 0; i < POLL_MS; i++) {
		n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n < 0 ? -1 : 0;
		usleep(1000);
	}
	return -1;
}

static int connect_qp(struct ibv_qp *qp, const struct info *me, const struct info *peer,
		      int gid_index)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = peer->qpn,
		.rq_psn = peer->psn, .max_dest_rd_atomic = 4, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = peer->gid, .sgid_index = gid_index, .hop_limit = 64 } },
	};

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = me->psn;
	a.max_rd_atomic = 4;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* One operation through the extended API, and its completion. NULL or why it failed. */
static const char *run_op(struct ibv_qp_ex *qx, struct ibv_cq *cq, int op,
			  const struct info *peer, struct ibv_mr *mr, uint8_t *buf,
			  uint8_t type, uint8_t level, enum ibv_wc_status want)
{
	static char why[160];
	uint64_t v = AW_VALUE;
	struct ibv_wc wc;

	ibv_wr_start(qx);
	qx->wr_id = (uint64_t)op;
	qx->wr_flags = IBV_SEND_SIGNALED;
	switch (op) {
	case IBV_WR_ATOMIC_WRITE:
		ibv_wr_atomic_write(qx, peer->rkey, peer->addr + AW_OFF, &v);
		break;
	case IBV_WR_RDMA_WRITE:
		ibv_wr_rdma_write(qx, peer->rkey, peer->addr + WR_OFF);
		ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf + WR_OFF, WR_LEN);
		break;
	default:
		ibv_wr_flush(qx, peer->rkey, peer->addr + WR_OFF, WR_LEN, type, level);
		break;
	}
	if (ibv_wr_complete(qx)) {
		snprintf(why, sizeof(why), "post: %s", strerror(errno));
		return why;
	}
	if (poll_one(cq, &wc)) {
		snprintf(why, sizeof(why), "no completion within %d ms", POLL_MS);
		return why;
	}
	if (wc.status != want) {
		snprintf(why, sizeof(why), "status %s, wanted %s", ibv_wc_status_str(wc.status),
			 ibv_wc_status_str(want));
		return why;
	}
	if (want == IBV_WC_SUCCESS &&
	    wc.opcode != (op == IBV_WR_ATOMIC_WRITE ? IBV_WC_ATOMIC_WRITE :
			  op == IBV_WR_RDMA_WRITE ? IBV_WC_RDMA_WRITE : IBV_WC_FLUSH)) {
		snprintf(why, sizeof(why), "completion opcode %d", wc.opcode);
		return why;
	}
	return NULL;
}

static int client(struct ibv_qp_ex *qx, struct ibv_cq *cq, const struct info *peer,
		  struct ibv_mr *mr, uint8_t *buf, int fd, int no_flush, int no_persistent)
{
	uint8_t ok = 0;
	int i;

	for (i = 0; i < WR_LEN; i++)
		buf[WR_OFF + i] = (uint8_t)(i * 7 + 3);
	report("atomic-write", run_op(qx, cq, IBV_WR_ATOMIC_WRITE, peer, mr, buf, 0, 0,
				      IBV_WC_SUCCESS));
	{
		const char *w = run_op(qx, cq, IBV_WR_RDMA_WRITE, peer, mr, buf, 0, 0, IBV_WC_SUCCESS);

		if (no_flush)
			report("rdma-write", w);
		else
			report("flush-range", w ? w : run_op(qx, cq, IBV_WR_FLUSH, peer, mr, buf,
							      IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE,
							      IBV_WC_SUCCESS));
	}
	if (!no_flush)
		report("flush-mr", run_op(qx, cq, IBV_WR_FLUSH, peer, mr, buf, IBV_FLUSH_GLOBAL,
					  IBV_FLUSH_MR, IBV_WC_SUCCESS));
	/* The server checks its memory now, while both QPs still work. */
	if (full_io(fd, &ok, 1, 1) || full_io(fd, &ok, 1, 0) || !ok)
		report("server-memory", "the server found its buffer wrong (see its output)");
	if (!no_flush && !no_persistent)
		report("persistent", run_op(qx, cq, IBV_WR_FLUSH, peer, mr, buf,
					    IBV_FLUSH_PERSISTENT, IBV_FLUSH_RANGE,
					    IBV_WC_REM_ACCESS_ERR));
	/* The server's QP must live until that refusal came back. */
	full_io(fd, &ok, 1, 1);
	return 0;
}

static int server(uint8_t *buf, int fd)
{
	uint8_t go, ok = 1;
	uint64_t v;
	int i;

	if (full_io(fd, &go, 1, 0)) {
		report("server-memory", "the client went away");
		return -1;
	}
	memcpy(&v, buf + AW_OFF, sizeof(v));
	if (v != AW_VALUE) {
		printf("flush-check: server-memory: 8 bytes at %d are %#llx\n", AW_OFF,
		       (unsigned long long)v);
		ok = 0;
	}
	for (i = 0; i < BUF; i++) {
		uint8_t want = i >= WR_OFF && i < WR_OFF + WR_LEN ? (uint8_t)((i - WR_OFF) * 7 + 3) :
			       i >= AW_OFF && i < AW_OFF + 8 ? buf[i] : 0;

		if (buf[i] != want) {
			printf("flush-check: server-memory: byte %d is %#x, wanted %#x\n", i, buf[i],
			       want);
			ok = 0;
			break;
		}
	}
	report("server-memory", ok ? NULL : "not what the client wrote");
	if (full_io(fd, &ok, 1, 1) || full_io(fd, &go, 1, 0))
		report("server-end", "the client went away before its last step");
	return 0;
}

int main(int argc, char **argv)
{
	const char *dev_name = "rnic0", *peer_addr = NULL;
	int gid_index = 1, port = 18520, no_flush = 0, no_persistent = 0, c, fd, n, i;
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct info me = {}, peer;
	uint8_t *buf;

	while ((c = getopt(argc, argv, "d:x:p:AP")) != -1) {
		if (c == 'A')
			no_flush = 1;
		else if (c == 'P')
			no_persistent = 1;
		else if (c == 'd')
			dev_name = optarg;
		else if (c == 'x')
			gid_index = atoi(optarg);
		else if (c == 'p')
			port = atoi(optarg);
		else
			return 2;
	}
	if (optind < argc)
		peer_addr = argv[optind];
	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev_name))
			ctx = ibv_open_device(list[i]);
	buf = aligned_alloc(BUF, BUF);
	if (!ctx || !buf) {
		fprintf(stderr, "rnic-flush-check: no device %s\n", dev_name);
		return 1;
	}
	memset(buf, 0, BUF);
	{
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE |
						    IBV_ACCESS_REMOTE_WRITE |
						    IBV_ACCESS_FLUSH_GLOBAL) : NULL;
		struct ibv_qp_init_attr_ex init = {
			.qp_type = IBV_QPT_RC, .send_cq = cq, .recv_cq = cq, .pd = pd,
			.cap = { .max_send_wr = 16, .max_recv_wr = 4, .max_send_sge = 1,
				 .max_recv_sge = 1 },
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_FLUSH |
					  IBV_QP_EX_WITH_ATOMIC_WRITE,
		};
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_INIT, .port_num = 1,
			.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_FLUSH_GLOBAL,
		};
		struct ibv_qp *qp = mr && cq ? ibv_create_qp_ex(ctx, &init) : NULL;

		if (!qp || ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					 IBV_QP_ACCESS_FLAGS) ||
		    ibv_query_gid(ctx, 1, gid_index, &me.gid)) {
			fprintf(stderr, "rnic-flush-check: %s: set-up failed (mr %p qp %p): %s\n",
				dev_name, (void *)mr, (void *)qp, strerror(errno));
			return 1;
		}
		me.qpn = qp->qp_num;
		me.psn = (uint32_t)getpid() & 0xffffff;
		me.addr = (uintptr_t)buf;
		me.rkey = mr->rkey;
		fd = connect_peer(peer_addr, port);
		if (fd < 0 || full_io(fd, &me, sizeof(me), 1) || full_io(fd, &peer, sizeof(peer), 0)) {
			fprintf(stderr, "rnic-flush-check: no peer: %s\n", strerror(errno));
			return 1;
		}
		if (connect_qp(qp, &me, &peer, gid_index)) {
			fprintf(stderr, "rnic-flush-check: connecting the QP: %s\n", strerror(errno));
			return 1;
		}
		/* The client's first request waits for the server's QP to be in RTR. */
		{
			uint8_t ready = 1;

			if (full_io(fd, &ready, 1, !peer_addr)) {
				fprintf(stderr, "rnic-flush-check: the peer went away\n");
				return 1;
			}
		}
		if (peer_addr)
			client(ibv_qp_to_qp_ex(qp), cq, &peer, mr, buf, fd, no_flush,
			       no_persistent);
		else
			server(buf, fd);
		close(fd);
	}
	return failures ? 1 : 0;
}
