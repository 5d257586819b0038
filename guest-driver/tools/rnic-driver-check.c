// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-driver-check: scenarios that check how the rnic_emu driver behaves when devices go
 * away under it, and at its resource bounds. Each prints "key: value" lines for a test
 * harness (which judges them) and ends with "ran: 1"; exit status 0 when the scenario
 * ran, 1 when it could not, 2 for bad usage. Needs root (sysfs unbind/remove).
 *
 *   rnic-driver-check [-d DEV] SCENARIO
 *
 *   ring-bounds     CREATE_QP at, over and far over QUERY_DEVICE max_ring_bytes
 *   remove-blocked  calls asleep on user memory that never arrives (userfaultfd: REG_MR,
 *                   POST_SEND inline data, POLL_CQ's completions, GPU_VA_TO_OFFSET) while
 *                   the RNIC and the GPU are unbound; then bound again
 *   gpu-revoke      an MR over GPU memory (QP connected, a WRITE into it done), then the
 *                   GPU removed from the PCI bus, then rescanned and used again
 *   teardown        a QP in each state destroyed (one DESTROY_QP each at the device); the
 *                   RNIC unbound while WRITEs stream, then bound again
 *   read-only-mr    an MR over a read-only file mapping: registered without write access,
 *                   refused with it; READ from it works, a WRITE into it and MR_SYNC
 *                   FROM_BOUNCE are refused, the file stays as it was
 *   hold            a connected QP pair posting WRITEs until the device stops answering
 *                   (prints "ready: 1" first); reports the errors each call then returns
 *   kmsg            every kernel log line since boot that reports a kernel bug (WARN,
 *                   BUG, lockdep, hung task), and their number as kmsg_bad_lines
 */
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/syscall.h>

#include "rnic_tool_sys.h"
#include "rnic_tool_verbs.h"

#define BUF		(1 << 20)
#define ACC_ALL		(RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ)
#define QP_ACC		(RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ)
#define UNBIND_WAIT_MS	20000

static const char *dev_path = RV_DEFAULT_DEV;

/* One file with a PD, a CQ, two connected QPs (A -> B) and source/destination MRs. */
struct pair {
	int fd;
	struct rnic_query_device q;
	uint32_t pd, cq, qp_a, qp_b;
	uint8_t *src, *dst;
	struct rv_mr src_mr, dst_mr;
};

static int pair_qp(struct pair *p, uint32_t *qpn)
{
	struct rnic_create_qp qp = {
		.pd = p->pd, .send_cqn = p->cq, .recv_cqn = p->cq, .max_send_wr = 64,
		.max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1, .max_inline = 64,
	};

	if (rv_create_qp(p->fd, &qp))
		return -1;
	*qpn = qp.qpn;
	return 0;
}

static int pair_setup(struct pair *p, void *dst, uint64_t dst_len)
{
	memset(p, 0, sizeof(*p));
	p->fd = rv_open(dev_path, &p->q);
	if (p->fd < 0)
		return -1;
	p->src = rv_alloc_buf(BUF);
	p->dst = dst ? dst : rv_alloc_buf(BUF);
	if (!p->src || !p->dst)
		return -1;
	rv_pattern_fill(p->src, BUF, 11);
	if (rv_alloc_pd(p->fd, &p->pd) || rv_create_cq(p->fd, 1024, &p->cq) ||
	    rv_reg_mr(p->fd, p->pd, p->src, BUF, ACC_ALL, &p->src_mr) ||
	    rv_reg_mr(p->fd, p->pd, p->dst, dst ? dst_len : BUF, ACC_ALL, &p->dst_mr) ||
	    pair_qp(p, &p->qp_a) || pair_qp(p, &p->qp_b) ||
	    rv_connect_qp(p->fd, p->qp_a, p->qp_b, QP_ACC, 7, 10) ||
	    rv_connect_qp(p->fd, p->qp_b, p->qp_a, QP_ACC, 7, 10))
		return -1;
	return 0;
}

static void write_wr(struct pair *p, struct rnic_send_wr *wr, uint64_t id, uint32_t len,
		     uint32_t rkey)
{
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = id;
	wr->opcode = RNIC_WQE_OP_RDMA_WRITE;
	wr->flags = RNIC_WQE_FLAG_SIGNALED;
	wr->remote_addr = (uintptr_t)p->dst;
	wr->rkey = rkey;
	wr->num_sge = 1;
	wr->sge[0].addr = (uintptr_t)p->src;
	wr->sge[0].length = len;
	wr->sge[0].lkey = p->src_mr.lkey;
}

/* One signaled WRITE of len bytes from src to dst; its completion status, or -1. */
static int write_once(struct pair *p, uint32_t qpn, uint32_t len, uint32_t rkey)
{
	struct rnic_send_wr wr;
	struct rnic_wc wc;

	write_wr(p, &wr, 1, len, rkey);
	if (rv_post_send(p->fd, qpn, &wr, 1) || rv_poll_cq(p->fd, p->cq, &wc, 1, 5000) != 1)
		return -1;
	return (int)wc.status;
}

/* errno of an ioctl, as a name */
static const char *try_ioctl(int fd, unsigned long req, void *arg)
{
	return rs_errno_name(ioctl(fd, req, arg) ? errno : 0);
}

/* The PCI address of /dev/rnic_emuN into bdf. */
static int rnic_bdf(char *bdf, size_t len)
{
	char link[256];

	rv_dev_sysfs(dev_path, link, sizeof(link));
	return rs_link_bdf(link, bdf, len);
}

/* Unbinds (or binds) the PCI function bdf from driver drv; prints key_ms or key: blocked. */
static long rebind(const char *drv, const char *op, const char *bdf, const char *key,
		   struct rs_bg_write *w)
{
	char path[128];
	long ms;

	snprintf(path, sizeof(path), "/sys/bus/pci/drivers/%s/%s", drv, op);
	if (rs_bg_write_start(w, path, bdf))
		return -1;
	ms = rs_bg_write_wait(w, UNBIND_WAIT_MS);
	if (ms < 0)
		printf("%s: blocked\n", key);
	else
		printf("%s: done\n%s_status: %s\n", key, key, rs_errno_name(w->status));
	return ms;
}

/* Waits for a device node to (re)appear. */
static int wait_path(const char *path, unsigned int ms)
{
	uint64_t deadline = rs_now_ms() + ms;

	while (access(path, F_OK)) {
		if (rs_now_ms() > deadline)
			return -1;
		rs_sleep_ms(50);
	}
	return 0;
}

/* ------------------------------------------------------------------ ring-bounds */

static const char *create_qp_err(struct pair *p, uint32_t wr, uint32_t sge)
{
	struct rnic_create_qp qp = {
		.pd = p->pd, .send_cqn = p->cq, .recv_cqn = p->cq, .max_send_wr = wr,
		.max_recv_wr = 1, .max_send_sge = sge, .max_recv_sge = 1,
	};
	const char *r = try_ioctl(p->fd, RNIC_IOCTL_CREATE_QP, &qp);

	if (!strcmp(r, "OK"))
		ioctl(p->fd, RNIC_IOCTL_DESTROY_QP, &qp);
	return r;
}

static int sc_ring_bounds(void)
{
	struct pair p;
	uint32_t slots;

	if (pair_setup(&p, NULL, 0))
		return -1;
	/* A 256-byte stride (14 SGEs): max_ring_bytes / 256 slots fit, one more does not. */
	slots = p.q.max_ring_bytes / 256;
	printf("max_ring_bytes: %u\n", p.q.max_ring_bytes);
	printf("max_ring_log2: %u\n", p.q.max_ring_log2);
	printf("qp_at_bound: %s\n", create_qp_err(&p, slots, RNIC_UAPI_MAX_SGE));
	printf("qp_over_bound: %s\n", create_qp_err(&p, slots + 1, RNIC_UAPI_MAX_SGE));
	printf("qp_32768x14: %s\n", create_qp_err(&p, 32768, RNIC_UAPI_MAX_SGE));
	printf("qp_32768x1: %s\n", create_qp_err(&p, 32768, 1));
	printf("cq_max: %s\n", try_ioctl(p.fd, RNIC_IOCTL_CREATE_CQ,
					 &(struct rnic_create_cq){ .entries = 1U << p.q.max_ring_log2 }));
	printf("after_status: %s\n", rv_wc_status_name(write_once(&p, p.qp_a, 4096, p.dst_mr.rkey)));
	close(p.fd);
	return 0;
}

/* ------------------------------------------------------------------ remove-blocked */

struct blocked_call {
	const char *name;
	int fd;
	unsigned long req;
	void *arg;
	int err;			/* errno when it returned */
	int returned;
	pthread_t thread;
};

static void *blocked_call_run(void *arg)
{
	struct blocked_call *b = arg;

	b->err = ioctl(b->fd, b->req, b->arg) ? errno : 0;
	__atomic_store_n(&b->returned, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/* Anonymous memory registered with userfaultfd (missing pages): faults on it wait. */
static void *uffd_region(int *uffd, size_t len)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg;
	void *p;

	*uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
	if (*uffd < 0) {
		fprintf(stderr, "error: userfaultfd: %s\n", strerror(errno));
		return NULL;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED || ioctl(*uffd, UFFDIO_API, &api))
		return NULL;
	reg.range.start = (uintptr_t)p;
	reg.range.len = len;
	reg.mode = UFFDIO_REGISTER_MODE_MISSING;
	if (ioctl(*uffd, UFFDIO_REGISTER, &reg)) {
		fprintf(stderr, "error: UFFDIO_REGISTER: %s\n", strerror(errno));
		return NULL;
	}
	return p;
}

static int sc_remove_blocked(void)
{
	struct rnic_reg_mr mr;
	struct rnic_send_wr wr;
	struct rnic_post post;
	struct rnic_poll_cq poll;
	struct rnic_gpu_va_to_offset va;
	struct blocked_call calls[4];
	struct rs_bg_write wn, wg;
	struct rv_gpu gpu;
	unsigned int i, ncalls = 3;
	char bdf[32];
	long nic_ms, gpu_ms = 0;
	bool have_gpu;
	uint8_t *u;
	int uffd;

	struct pair p;

	if (pair_setup(&p, NULL, 0) || rnic_bdf(bdf, sizeof(bdf)))
		return -1;
	u = uffd_region(&uffd, 4 * 4096);
	if (!u)
		return -1;
	have_gpu = rv_gpu_open(0, &gpu) == 0;

	/* REG_MR over it: pinning faults. */
	mr = (struct rnic_reg_mr){ .addr = (uintptr_t)u, .length = 4096, .access = ACC_ALL,
				   .pd = p.pd };
	calls[0] = (struct blocked_call){ .name = "reg_mr", .fd = p.fd, .req = RNIC_IOCTL_REG_MR, .arg = &mr };
	/* POST_SEND with inline data there: copying it in faults. */
	write_wr(&p, &wr, 7, 0, p.dst_mr.rkey);
	wr.num_sge = 0;
	wr.flags |= RNIC_WQE_FLAG_INLINE;
	wr.inline_len = 32;
	wr.inline_data = (uintptr_t)(u + 4096);
	post = (struct rnic_post){ .qpn = p.qp_a, .num_wr = 1, .wrs = (uintptr_t)&wr };
	calls[1] = (struct blocked_call){ .name = "post_send", .fd = p.fd, .req = RNIC_IOCTL_POST_SEND, .arg = &post };
	/* POLL_CQ with a completion ready and the results going there: copying out faults. */
	if (write_once(&p, p.qp_a, 64, p.dst_mr.rkey) != RNIC_WC_SUCCESS)
		return -1;
	{
		struct rnic_send_wr w2;

		write_wr(&p, &w2, 8, 64, p.dst_mr.rkey);
		if (rv_post_send(p.fd, p.qp_a, &w2, 1))
			return -1;
		rs_sleep_ms(300);	/* its completion is in the CQ */
	}
	poll = (struct rnic_poll_cq){ .cqn = p.cq, .num_entries = 1,
				      .wcs = (uintptr_t)(u + 2 * 4096) };
	calls[2] = (struct blocked_call){ .name = "poll_cq", .fd = p.fd, .req = RNIC_IOCTL_POLL_CQ, .arg = &poll };
	if (have_gpu) {
		va.va = (uintptr_t)(u + 3 * 4096);
		calls[3] = (struct blocked_call){ .name = "gpu_va_to_offset", .fd = gpu.fd,
						  .req = RNIC_GPU_IOCTL_VA_TO_OFFSET, .arg = &va };
		ncalls = 4;
	}
	for (i = 0; i < ncalls; i++)
		pthread_create(&calls[i].thread, NULL, blocked_call_run, &calls[i]);
	rs_sleep_ms(500);
	for (i = 0; i < ncalls; i++)
		printf("%s_blocked: %d\n", calls[i].name, !__atomic_load_n(&calls[i].returned,
									   __ATOMIC_SEQ_CST));

	nic_ms = rebind("rnic_emu", "unbind", bdf, "rnic_unbind", &wn);
	if (have_gpu)
		gpu_ms = rebind("rnic_emu_gpu", "unbind", gpu.pci, "gpu_unbind", &wg);

	/* Let the faults go (the region loses its userfaultfd), then everything returns. */
	close(uffd);
	for (i = 0; i < ncalls; i++) {
		pthread_join(calls[i].thread, NULL);
		printf("%s_errno: %s\n", calls[i].name, rs_errno_name(calls[i].err));
	}
	if (nic_ms < 0 && rs_bg_write_wait(&wn, UNBIND_WAIT_MS) >= 0)
		printf("rnic_unbind_after_release: done\n");
	if (have_gpu && gpu_ms < 0 && rs_bg_write_wait(&wg, UNBIND_WAIT_MS) >= 0)
		printf("gpu_unbind_after_release: done\n");
	printf("after_unbind_query: %s\n", try_ioctl(p.fd, RNIC_IOCTL_QUERY_DEVICE, &p.q));
	close(p.fd);
	if (have_gpu)
		close(gpu.fd);

	rebind("rnic_emu", "bind", bdf, "rnic_bind", &wn);
	if (have_gpu)
		rebind("rnic_emu_gpu", "bind", gpu.pci, "gpu_bind", &wg);
	if (wait_path(dev_path, 10000) || pair_setup(&p, NULL, 0))
		return -1;
	printf("rebound_status: %s\n", rv_wc_status_name(write_once(&p, p.qp_a, 4096, p.dst_mr.rkey)));
	printf("rebound_data_ok: %d\n", !memcmp(p.src, p.dst, 4096));
	close(p.fd);
	return 0;
}

/* ------------------------------------------------------------------ gpu-revoke */

/*
 * A pair whose destination is 64 KiB of GPU 0 memory, and a verified 4 KiB WRITE into it,
 * reported as <what>_path, <what>_status, <what>_data_ok. The mapping in *g.
 */
static int gpu_pair_write(struct rv_gpu *gpu, struct pair *p, uint8_t **g, const char *what)
{
	if (rv_gpu_open(0, gpu))
		return -1;
	*g = rv_gpu_alloc(gpu, 65536);
	if (!*g || pair_setup(p, *g, 65536))
		return -1;
	printf("%s_path: %s\n", what, rv_mr_path_name(p->dst_mr.path));
	printf("%s_status: %s\n", what,
	       rv_wc_status_name(write_once(p, p->qp_a, 4096, p->dst_mr.rkey)));
	printf("%s_data_ok: %d\n", what, rv_pattern_check(*g, 4096, 11) == 4096);
	return 0;
}

static int sc_gpu_revoke(void)
{
	char path[160], stats[160];
	struct rs_bg_write w;
	struct rnic_query_qp qq;
	struct rv_gpu gpu;
	struct pair p, q;
	unsigned long long revoked = 0;
	uint8_t *g;
	long ms;

	if (gpu_pair_write(&gpu, &p, &g, "before"))
		return -1;
	munmap(g, 65536);	/* removal zaps the mapping: no access to it afterwards */
	close(gpu.fd);

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/remove", gpu.pci);
	if (rs_bg_write_start(&w, path, "1"))
		return -1;
	ms = rs_bg_write_wait(&w, UNBIND_WAIT_MS);
	if (ms < 0) {
		printf("gpu_remove: blocked\n");
		/* What unblocks it: the MR goes away. */
		ioctl(p.fd, RNIC_IOCTL_DEREG_MR, &(struct rnic_reg_mr){ .index = p.dst_mr.index });
		if (rs_bg_write_wait(&w, UNBIND_WAIT_MS) >= 0)
			printf("gpu_remove_after_dereg: done\n");
	} else {
		printf("gpu_remove: done\n");
	}
	rv_dev_sysfs(dev_path, stats, sizeof(stats));
	strncat(stats, "/driver_stats", sizeof(stats) - strlen(stats) - 1);
	rv_read_stat(stats, "revoked_mrs", &revoked);
	printf("revoked_mrs: %llu\n", revoked);
	if (!rv_query_qp(p.fd, p.qp_a, &qq))
		printf("qp_state_after: %s\n", rv_qp_state_name(qq.qp_state));
	printf("mr_sync_revoked: %s\n",
	       try_ioctl(p.fd, RNIC_IOCTL_MR_SYNC, &(struct rnic_mr_sync){
			.index = p.dst_mr.index, .direction = RNIC_MR_SYNC_TO_BOUNCE, .length = 1 }));
	/* A fresh QP pair of the same PD: the revoked rkey fails at the device. */
	q = p;
	if (pair_qp(&q, &q.qp_a) || pair_qp(&q, &q.qp_b) ||
	    rv_connect_qp(q.fd, q.qp_a, q.qp_b, QP_ACC, 7, 10) ||
	    rv_connect_qp(q.fd, q.qp_b, q.qp_a, QP_ACC, 7, 10))
		return -1;
	printf("revoked_rkey_status: %s\n",
	       rv_wc_status_name(write_once(&q, q.qp_a, 64, p.dst_mr.rkey)));
	printf("dereg_revoked: %s\n", try_ioctl(p.fd, RNIC_IOCTL_DEREG_MR,
						&(struct rnic_reg_mr){ .index = p.dst_mr.index }));
	close(p.fd);

	if (rs_write_file("/sys/bus/pci/rescan", "1") || wait_path("/dev/rnic_gpu0", 10000)) {
		printf("gpu_back: 0\n");
		return -1;
	}
	printf("gpu_back: 1\n");
	if (gpu_pair_write(&gpu, &p, &g, "after_rescan"))
		return -1;
	close(p.fd);
	munmap(g, 65536);
	close(gpu.fd);
	return 0;
}

/* ------------------------------------------------------------------ teardown */

static unsigned long long device_commands(void)
{
	char path[160];
	unsigned long long v = 0;

	rv_dev_sysfs(dev_path, path, sizeof(path));
	strncat(path, "/stats", sizeof(path) - strlen(path) - 1);
	rv_read_stat(path, "commands", &v);
	return v;
}

struct streamer {
	struct pair *p;
	volatile int stop;
	int err;
	unsigned long writes;
};

/* Posts batches of 64 KiB WRITEs and polls them until a call fails. */
static void *stream_run(void *arg)
{
	struct streamer *s = arg;
	struct rnic_send_wr wr[16];
	struct rnic_wc wc[16];
	unsigned int i;
	int n;

	while (!s->stop) {
		for (i = 0; i < 16; i++)
			write_wr(s->p, &wr[i], i, 65536, s->p->dst_mr.rkey);
		if (rv_post_send(s->p->fd, s->p->qp_a, wr, 16)) {
			s->err = errno;
			return NULL;
		}
		for (i = 0; i < 16; i += (unsigned int)n) {
			n = rv_poll_cq(s->p->fd, s->p->cq, wc, 16, 1000);
			if (n < 0) {
				s->err = errno;
				return NULL;
			}
			if (n == 0)
				break;
		}
		s->writes += 16;
	}
	return NULL;
}

static int sc_teardown(void)
{
	struct streamer s = { 0 };
	struct rs_bg_write w;
	struct pair p;
	uint32_t qps[4];
	unsigned long long before;
	pthread_t t;
	char bdf[32];
	unsigned int i;

	if (pair_setup(&p, NULL, 0) || rnic_bdf(bdf, sizeof(bdf)))
		return -1;
	/* One QP per state: RESET (never modified), INIT, RTS (connected), ERR. */
	for (i = 0; i < 4; i++)
		if (pair_qp(&p, &qps[i]))
			return -1;
	if (rv_modify_qp(p.fd, qps[1], RNIC_QPS_INIT, 0, 0, 0, 0, 0) ||
	    rv_connect_qp(p.fd, qps[2], qps[3], QP_ACC, 7, 10) ||
	    rv_modify_qp(p.fd, qps[3], RNIC_QPS_ERR, 0, 0, 0, 0, 0))
		return -1;
	before = device_commands();
	for (i = 0; i < 4; i++)
		if (rv_ioctl(p.fd, RNIC_IOCTL_DESTROY_QP, &(struct rnic_create_qp){ .qpn = qps[i] },
			     "DESTROY_QP"))
			return -1;
	printf("destroyed_qps: 4\n");
	printf("destroy_commands: %llu\n", device_commands() - before);

	/* Unbind while WRITEs stream. */
	s.p = &p;
	pthread_create(&t, NULL, stream_run, &s);
	rs_sleep_ms(500);
	rebind("rnic_emu", "unbind", bdf, "unbind_under_traffic", &w);
	s.stop = 1;
	pthread_join(t, NULL);
	printf("streamed_writes_before: %d\n", s.writes > 0);
	printf("traffic_errno: %s\n", rs_errno_name(s.err));
	close(p.fd);
	rebind("rnic_emu", "bind", bdf, "rebind", &w);
	if (wait_path(dev_path, 10000) || pair_setup(&p, NULL, 0))
		return -1;
	printf("rebound_status: %s\n", rv_wc_status_name(write_once(&p, p.qp_a, BUF, p.dst_mr.rkey)));
	printf("rebound_data_ok: %d\n", !memcmp(p.src, p.dst, BUF));
	close(p.fd);
	return 0;
}

/* ------------------------------------------------------------------ read-only-mr */

static int sc_read_only_mr(void)
{
	const char *path = "/tmp/rnic-driver-check.ro";
	struct rnic_send_wr wr;
	struct rnic_wc wc;
	struct rv_mr ro;
	struct pair p;
	uint8_t *m;
	int fd;

	if (pair_setup(&p, NULL, 0))
		return -1;
	/* A file the caller maps read-only (as a user who may only read it would). */
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, p.src, 65536) != 65536)
		return -1;
	close(fd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	m = fd < 0 ? MAP_FAILED : mmap(NULL, 65536, PROT_READ, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return -1;
	printf("rw_reg_on_ro_mapping: %s\n", try_ioctl(p.fd, RNIC_IOCTL_REG_MR,
		&(struct rnic_reg_mr){ .addr = (uintptr_t)m, .length = 65536, .pd = p.pd,
				       .access = RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_READ }));
	if (rv_reg_mr(p.fd, p.pd, m, 65536, RNIC_ACCESS_REMOTE_READ, &ro))
		return -1;
	printf("ro_reg: OK\n");
	/* READ from it into dst: allowed. */
	memset(p.dst, 0, 65536);
	write_wr(&p, &wr, 2, 0, 0);
	wr.opcode = RNIC_WQE_OP_RDMA_READ;
	wr.remote_addr = (uintptr_t)m;
	wr.rkey = ro.rkey;
	wr.sge[0].addr = (uintptr_t)p.dst;
	wr.sge[0].length = 65536;
	wr.sge[0].lkey = p.dst_mr.lkey;
	if (rv_post_send(p.fd, p.qp_a, &wr, 1) || rv_poll_cq(p.fd, p.cq, &wc, 1, 5000) != 1)
		return -1;
	printf("read_from_ro_status: %s\n", rv_wc_status_name(wc.status));
	printf("read_data_ok: %d\n", !memcmp(p.dst, m, 65536));
	printf("sync_to_bounce_ro: %s\n", try_ioctl(p.fd, RNIC_IOCTL_MR_SYNC,
		&(struct rnic_mr_sync){ .index = ro.index, .direction = RNIC_MR_SYNC_TO_BOUNCE,
					.length = 4096 }));
	printf("sync_from_bounce_ro: %s\n", try_ioctl(p.fd, RNIC_IOCTL_MR_SYNC,
		&(struct rnic_mr_sync){ .index = ro.index, .direction = RNIC_MR_SYNC_FROM_BOUNCE,
					.length = 4096 }));
	/* A WRITE into it (from a fresh pair: the READ QP stays usable): refused. */
	memset(p.src, 0x5a, 4096);
	write_wr(&p, &wr, 3, 4096, ro.rkey);
	wr.remote_addr = (uintptr_t)m;
	if (rv_post_send(p.fd, p.qp_a, &wr, 1) || rv_poll_cq(p.fd, p.cq, &wc, 1, 5000) != 1)
		return -1;
	printf("write_into_ro_status: %s\n", rv_wc_status_name(wc.status));
	printf("file_untouched: %d\n", rv_pattern_check(m, 65536, 11) == 65536);
	munmap(m, 65536);
	close(fd);
	close(p.fd);
	unlink(path);
	return 0;
}

/* ------------------------------------------------------------------ hold */

static int sc_hold(void)
{
	struct rnic_send_wr wr;
	struct rnic_wc wc;
	struct pair p;
	uint64_t start, deadline;
	int err = 0, n;

	if (pair_setup(&p, NULL, 0))
		return -1;
	printf("first_status: %s\n", rv_wc_status_name(write_once(&p, p.qp_a, 4096, p.dst_mr.rkey)));
	printf("ready: 1\n");
	fflush(stdout);
	start = rs_now_ms();
	deadline = start + 120000;
	while (!err && rs_now_ms() < deadline) {
		write_wr(&p, &wr, 1, 4096, p.dst_mr.rkey);
		if (ioctl(p.fd, RNIC_IOCTL_POST_SEND,
			  &(struct rnic_post){ .qpn = p.qp_a, .num_wr = 1, .wrs = (uintptr_t)&wr })) {
			err = errno;
			break;
		}
		n = rv_poll_cq(p.fd, p.cq, &wc, 1, 2000);
		if (n < 0)
			err = errno;
		rs_sleep_ms(100);
	}
	printf("first_error: %s\n", rs_errno_name(err));
	printf("error_after_ms: %llu\n", (unsigned long long)(rs_now_ms() - start));
	printf("query_device_after: %s\n", try_ioctl(p.fd, RNIC_IOCTL_QUERY_DEVICE, &p.q));
	printf("create_cq_after: %s\n", try_ioctl(p.fd, RNIC_IOCTL_CREATE_CQ,
						  &(struct rnic_create_cq){ .entries = 4 }));
	printf("poll_after: %s\n", try_ioctl(p.fd, RNIC_IOCTL_POLL_CQ,
		&(struct rnic_poll_cq){ .cqn = p.cq, .num_entries = 1, .wcs = (uintptr_t)&wc,
					.timeout_ms = 1000 }));
	printf("close: %s\n", rs_errno_name(close(p.fd) ? errno : 0));
	return err ? 0 : -1;
}

static int sc_kmsg(void)
{
	printf("kmsg_bad_lines: %d\n", rs_kmsg_scan());
	return 0;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(void);
	} scenarios[] = {
		{ "ring-bounds", sc_ring_bounds },
		{ "remove-blocked", sc_remove_blocked },
		{ "gpu-revoke", sc_gpu_revoke },
		{ "teardown", sc_teardown },
		{ "read-only-mr", sc_read_only_mr },
		{ "hold", sc_hold },
		{ "kmsg", sc_kmsg },
	};
	unsigned int i;
	int opt;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "d:")) != -1) {
		if (opt != 'd')
			goto usage;
		dev_path = optarg;
	}
	if (optind + 1 != argc)
		goto usage;
	for (i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
		if (strcmp(argv[optind], scenarios[i].name))
			continue;
		printf("scenario: %s\n", scenarios[i].name);
		if (scenarios[i].fn()) {
			printf("ran: 0\n");
			return 1;
		}
		printf("ran: 1\n");
		return 0;
	}
usage:
	fprintf(stderr, "usage: rnic-driver-check [-d DEV] ring-bounds|remove-blocked|gpu-revoke|teardown|read-only-mr|hold|kmsg\n");
	return 2;
}
