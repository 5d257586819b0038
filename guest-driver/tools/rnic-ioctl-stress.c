// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-ioctl-stress: seeded random sequences of every ioctl of /dev/rnic_emuN and
 * /dev/rnic_gpuN, with valid, boundary and invalid arguments, from several processes and
 * threads at once; files are closed while other threads still use them; meanwhile the
 * GPU is removed from the PCI bus and rescanned, and the RNIC is unbound and bound again.
 * It fails (exit 1) when a device removal or bind does not finish within 30 s, a worker
 * does not finish, or the kernel log shows a WARN, BUG, lockdep report or hung task.
 *
 *   rnic-ioctl-stress [-s SEED] [-t SECONDS] [-p PROCS] [-j THREADS] [-c CYCLE_MS] [-n]
 *     -s  seed (default 1); the same seed gives the same choices per thread
 *     -t  run time in seconds (default 120)
 *     -p  worker processes (default 3), -j threads per process (default 3)
 *     -c  milliseconds between device removal cycles (default 3000); -n: no cycles
 *
 * Output: "key: value" lines (seed, ops, per-ioctl calls and successes, cycles), any bad
 * kernel log lines as "kmsg_bad: ...", and "result: PASS" or "result: FAIL".
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "rnic_tool_rand.h"
#include "rnic_tool_sys.h"
#include "rnic_tool_verbs.h"

#define NFD		6
#define NIDS		16
#define HOST_BUF	(4 << 20)
#define GPU_BUF		(1 << 20)
#define CYCLE_WAIT_MS	30000

enum {
	OP_QUERY_DEVICE, OP_ALLOC_PD, OP_DEALLOC_PD, OP_CREATE_CQ, OP_DESTROY_CQ, OP_CREATE_QP,
	OP_DESTROY_QP, OP_MODIFY_QP, OP_QUERY_QP, OP_REG_MR, OP_DEREG_MR, OP_POST_SEND,
	OP_POST_RECV, OP_POLL_CQ, OP_MR_SYNC, OP_GPU_QUERY, OP_GPU_VA_TO_OFFSET, OP_GPU_LAUNCH,
	OP_BAD_CMD, OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
	"query_device", "alloc_pd", "dealloc_pd", "create_cq", "destroy_cq", "create_qp",
	"destroy_qp", "modify_qp", "query_qp", "reg_mr", "dereg_mr", "post_send", "post_recv",
	"poll_cq", "mr_sync", "gpu_query", "gpu_va_to_offset", "gpu_launch", "bad_cmd",
};

/* Counters shared by every worker (MAP_SHARED). */
struct shared {
	unsigned long calls[OP_COUNT], ok[OP_COUNT];
	unsigned long opens, closes, flows, flows_ok;
	/*
	 * Held around mmap of p2pmem/allocate. kernfs counts the mapped open files of a sysfs
	 * node with a plain increment under each file's own mutex, so two processes mapping
	 * the same node at once can lose a count, and the next GPU removal then trips
	 * WARN_ON_ONCE(on->nr_mmapped) in kernfs_drain_open_files(). That race is in the
	 * kernel's sysfs core, not in our drivers; the stress test is about our drivers.
	 */
	pthread_mutex_t map_lock;
};

static struct shared *sh;
static const char *rnic_dev = RV_DEFAULT_DEV;
static uint64_t deadline_ms;

/* One worker process: its files, the object numbers it saw, its buffers. */
struct proc {
	int rnic_fd[NFD], gpu_fd[NFD];	/* -1: empty; swapped and closed by any thread */
	uint32_t ids[4][NIDS];		/* PD, CQ, QP, MR numbers returned lately */
	uint8_t *host, *ro, *hole;	/* read-write, read-only, unmapped */
	uint8_t *gpu;			/* a p2pmem mapping (may be dead after a removal) */
	uint64_t bar1_size;
	pthread_mutex_t gpu_lock;
};

static struct proc P;

enum { ID_PD, ID_CQ, ID_QP, ID_MR };

static void remember(int kind, uint32_t id, uint64_t *s)
{
	__atomic_store_n(&P.ids[kind][rr_below(s, NIDS)], id, __ATOMIC_RELAXED);
}

/* A number for a field: a known object, a boundary, or anything. */
static uint32_t pick_id(int kind, uint64_t *s)
{
	static const uint32_t edges[] = { 0, 1, 2, 255, 256, 4095, 4096, 65535, 65536,
					  0xffffff, 0x1000000, 0x7fffffff, 0xffffffff };

	switch (rr_below(s, 8)) {
	case 0:
		return edges[rr_below(s, sizeof(edges) / sizeof(edges[0]))];
	case 1:
		return (uint32_t)rr_next(s);
	default:
		return __atomic_load_n(&P.ids[kind][rr_below(s, NIDS)], __ATOMIC_RELAXED);
	}
}

static uint32_t pick_size(uint64_t *s)
{
	static const uint32_t sizes[] = { 0, 1, 2, 3, 4, 14, 15, 16, 17, 64, 224, 225, 256, 1024,
					  4096, 16384, 16385, 32768, 32769, 65536, 0xffffffff };

	return rr_below(s, 3) ? 1 + rr_below(s, 64) :
			       sizes[rr_below(s, sizeof(sizes) / sizeof(sizes[0]))];
}

/* A user pointer: valid memory, read-only memory, a hole, NULL, kernel space, GPU memory. */
static uint64_t pick_ptr(uint64_t *s, uint32_t len)
{
	uint32_t off = len < HOST_BUF ? rr_below(s, HOST_BUF - len) : 0;

	switch (rr_below(s, 10)) {
	case 0:
		return 0;
	case 1:
		return (uintptr_t)P.hole + rr_below(s, 4096);
	case 2:
		return 0xffff888000000000ull + rr_below(s, 1 << 20);
	case 3:
		return (uintptr_t)P.ro + (off & (HOST_BUF / 4 - 1));
	case 4:
		return P.gpu ? (uintptr_t)P.gpu + rr_below(s, GPU_BUF) : 0;
	case 5:
		return (uintptr_t)P.host + HOST_BUF - rr_below(s, 64);	/* runs off the end */
	default:
		return (uintptr_t)P.host + off;
	}
}

static int get_fd(int *tab, uint64_t *s)
{
	return __atomic_load_n(&tab[rr_below(s, NFD)], __ATOMIC_RELAXED);
}

static void open_fd(int *tab, const char *path, uint64_t *s)
{
	int fd = open(path, O_RDWR | O_CLOEXEC), old;

	if (fd < 0)
		return;
	__atomic_fetch_add(&sh->opens, 1, __ATOMIC_RELAXED);
	old = __atomic_exchange_n(&tab[rr_below(s, NFD)], fd, __ATOMIC_SEQ_CST);
	if (old >= 0)
		close(old);	/* other threads may be inside an ioctl on it right now */
}

static void close_fd(int *tab, uint64_t *s)
{
	int old = __atomic_exchange_n(&tab[rr_below(s, NFD)], -1, __ATOMIC_SEQ_CST);

	if (old >= 0) {
		close(old);
		__atomic_fetch_add(&sh->closes, 1, __ATOMIC_RELAXED);
	}
}

/* (Re)maps GPU memory of /dev/rnic_gpu0, which may be a new GPU after a rescan. */
static void remap_gpu(void)
{
	struct rv_gpu g;
	void *p;

	if (rv_gpu_open(0, &g))
		return;
	pthread_mutex_lock(&sh->map_lock);
	p = rv_gpu_alloc(&g, GPU_BUF);
	pthread_mutex_unlock(&sh->map_lock);
	close(g.fd);
	if (!p)
		return;
	pthread_mutex_lock(&P.gpu_lock);
	/* The old mapping stays (other threads may hand it to the kernel): never touched. */
	P.gpu = p;
	P.bar1_size = g.q.bar1_size;
	pthread_mutex_unlock(&P.gpu_lock);
}

static void fill_random(void *p, size_t len, uint64_t *s)
{
	uint8_t *b = p;
	size_t i;

	for (i = 0; i < len; i++)
		b[i] = (uint8_t)rr_next(s);
}

/* Work requests: random bytes, made plausible more often than not. */
static void random_send_wrs(struct rnic_send_wr *w, uint32_t n, uint64_t *s)
{
	uint32_t i;

	fill_random(w, n * sizeof(*w), s);
	for (i = 0; i < n; i++) {
		if (rr_below(s, 4) == 0)
			continue;
		w[i].pad = 0;
		w[i].opcode = (uint8_t)rr_below(s, 6);
		w[i].flags = (uint8_t)rr_below(s, 8);
		w[i].num_sge = (uint8_t)rr_below(s, 3);
		w[i].inline_len = rr_below(s, 2) ? 0 : rr_below(s, 300);
		w[i].inline_data = pick_ptr(s, w[i].inline_len);
		w[i].rkey = pick_id(ID_MR, s) << 8 | rr_below(s, 4);
		w[i].remote_addr = pick_ptr(s, 4096);
		w[i].sge[0].addr = pick_ptr(s, 4096);
		w[i].sge[0].length = rr_below(s, 8192);
		w[i].sge[0].lkey = pick_id(ID_MR, s) << 8 | rr_below(s, 4);
	}
}

static void count(int op, int ret)
{
	__atomic_fetch_add(&sh->calls[op], 1, __ATOMIC_RELAXED);
	if (!ret)
		__atomic_fetch_add(&sh->ok[op], 1, __ATOMIC_RELAXED);
}

/* One random RNIC ioctl on fd. */
static void rnic_op(int fd, uint64_t *s)
{
	union {
		struct rnic_query_device qd;
		struct rnic_alloc_pd pd;
		struct rnic_create_cq cq;
		struct rnic_create_qp qp;
		struct rnic_modify_qp m;
		struct rnic_query_qp qq;
		struct rnic_reg_mr mr;
		struct rnic_post post;
		struct rnic_poll_cq poll;
		struct rnic_mr_sync sync;
		uint8_t raw[128];
	} a;
	static __thread struct rnic_send_wr wrs[40];
	static __thread struct rnic_wc wcs[300];
	int op = (int)rr_below(s, OP_MR_SYNC + 1), ret;
	unsigned long cmd = 0;

	fill_random(&a, sizeof(a), s);
	if (rr_below(s, 4))
		memset(&a, 0, sizeof(a));	/* mostly zero padding, so the call goes deep */
	switch (op) {
	case OP_QUERY_DEVICE: cmd = RNIC_IOCTL_QUERY_DEVICE; break;
	case OP_ALLOC_PD: cmd = RNIC_IOCTL_ALLOC_PD; break;
	case OP_DEALLOC_PD:
		cmd = RNIC_IOCTL_DEALLOC_PD;
		a.pd.pd = pick_id(ID_PD, s);
		break;
	case OP_CREATE_CQ:
		cmd = RNIC_IOCTL_CREATE_CQ;
		a.cq.entries = pick_size(s);
		break;
	case OP_DESTROY_CQ:
		cmd = RNIC_IOCTL_DESTROY_CQ;
		a.cq.cqn = pick_id(ID_CQ, s);
		break;
	case OP_CREATE_QP:
		cmd = RNIC_IOCTL_CREATE_QP;
		a.qp.pd = pick_id(ID_PD, s);
		a.qp.send_cqn = pick_id(ID_CQ, s);
		a.qp.recv_cqn = rr_below(s, 2) ? a.qp.send_cqn : pick_id(ID_CQ, s);
		a.qp.max_send_wr = pick_size(s);
		a.qp.max_recv_wr = pick_size(s);
		a.qp.max_send_sge = rr_below(s, 16);
		a.qp.max_recv_sge = rr_below(s, 16);
		a.qp.max_inline = rr_below(s, 3) ? rr_below(s, 64) : pick_size(s);
		break;
	case OP_DESTROY_QP:
		cmd = RNIC_IOCTL_DESTROY_QP;
		a.qp.qpn = pick_id(ID_QP, s);
		break;
	case OP_MODIFY_QP:
		cmd = RNIC_IOCTL_MODIFY_QP;
		a.m.qpn = pick_id(ID_QP, s);
		a.m.qp_state = rr_below(s, 8);
		a.m.attr_mask = rr_below(s, 2) ? (uint32_t)rr_next(s) & 0x3ff : 0;
		a.m.dest_qpn = pick_id(ID_QP, s);
		a.m.access = rr_below(s, 8);
		a.m.path_mtu = 256u << rr_below(s, 6);
		a.m.dest_ip = rr_below(s, 2) ? 0 : (uint32_t)rr_next(s);
		break;
	case OP_QUERY_QP:
		cmd = RNIC_IOCTL_QUERY_QP;
		a.qq.qpn = pick_id(ID_QP, s);
		break;
	case OP_REG_MR:
		cmd = RNIC_IOCTL_REG_MR;
		a.mr.length = rr_below(s, 8) ? 1 + rr_below(s, 1 << 20) :
			      (rr_below(s, 2) ? RNIC_UAPI_MAX_MR_SIZE + 1 : RNIC_UAPI_MAX_MR_SIZE);
		a.mr.addr = pick_ptr(s, (uint32_t)(a.mr.length < HOST_BUF ? a.mr.length : 0));
		a.mr.access = rr_below(s, 8);
		a.mr.pd = pick_id(ID_PD, s);
		a.mr.flags = rr_below(s, 4) == 0;
		break;
	case OP_DEREG_MR:
		cmd = RNIC_IOCTL_DEREG_MR;
		a.mr.index = pick_id(ID_MR, s);
		break;
	case OP_POST_SEND:
	case OP_POST_RECV:
		cmd = op == OP_POST_SEND ? RNIC_IOCTL_POST_SEND : RNIC_IOCTL_POST_RECV;
		a.post.qpn = pick_id(ID_QP, s);
		a.post.num_wr = rr_below(s, 8) ? rr_below(s, 40) : pick_size(s);
		random_send_wrs(wrs, 40, s);
		a.post.wrs = rr_below(s, 6) ? (uintptr_t)wrs : pick_ptr(s, 4096);
		break;
	case OP_POLL_CQ:
		cmd = RNIC_IOCTL_POLL_CQ;
		a.poll.cqn = pick_id(ID_CQ, s);
		a.poll.num_entries = rr_below(s, 8) ? 1 + rr_below(s, 64) : pick_size(s);
		a.poll.wcs = rr_below(s, 6) ? (uintptr_t)wcs : pick_ptr(s, 4096);
		a.poll.timeout_ms = rr_below(s, 4) ? 0 :
				    rr_below(s, 4) ? rr_below(s, 50) : pick_size(s);
		break;
	case OP_MR_SYNC:
		cmd = RNIC_IOCTL_MR_SYNC;
		a.sync.index = pick_id(ID_MR, s);
		a.sync.direction = rr_below(s, 4);
		a.sync.offset = rr_below(s, 2) ? 0 : rr_next(s);
		a.sync.length = rr_below(s, 2) ? rr_below(s, 8192) : rr_next(s);
		break;
	}
	ret = ioctl(fd, cmd, &a);
	count(op, ret);
	if (ret)
		return;
	switch (op) {
	case OP_ALLOC_PD: remember(ID_PD, a.pd.pd, s); break;
	case OP_CREATE_CQ: remember(ID_CQ, a.cq.cqn, s); break;
	case OP_CREATE_QP:
		remember(ID_QP, a.qp.qpn, s);
		/* Big rings are destroyed at once: the point was creating them. */
		if (a.qp.max_send_wr > 1024 || a.qp.max_recv_wr > 1024)
			ioctl(fd, RNIC_IOCTL_DESTROY_QP, &a);
		break;
	case OP_REG_MR: remember(ID_MR, a.mr.index, s); break;
	}
}

/* One random GPU ioctl on fd. */
static void gpu_op(int fd, uint64_t *s)
{
	union {
		struct rnic_gpu_query q;
		struct rnic_gpu_va_to_offset va;
		struct rnic_gpu_launch l;
	} a;
	int op = OP_GPU_QUERY + (int)rr_below(s, 3), ret;
	unsigned long cmd;
	uint64_t bar = P.bar1_size ? P.bar1_size : (256u << 20);

	memset(&a, 0, sizeof(a));
	if (op == OP_GPU_QUERY) {
		cmd = RNIC_GPU_IOCTL_QUERY;
	} else if (op == OP_GPU_VA_TO_OFFSET) {
		cmd = RNIC_GPU_IOCTL_VA_TO_OFFSET;
		a.va.va = pick_ptr(s, 1);
	} else {
		cmd = RNIC_GPU_IOCTL_LAUNCH;
		a.l.op = rr_below(s, 5);
		a.l.value = (uint32_t)rr_next(s);
		a.l.len = rr_below(s, 4) ? (rr_below(s, 1 << 18) & ~3u) : rr_next(s);
		a.l.src = rr_below(s, 4) ? rr_below(s, (uint32_t)(bar >> 2)) & ~3u : rr_next(s);
		a.l.src2 = rr_below(s, 4) ? rr_below(s, (uint32_t)(bar >> 2)) & ~3u : rr_next(s);
		a.l.dst = rr_below(s, 4) ? rr_below(s, (uint32_t)(bar >> 2)) & ~3u : rr_next(s);
		a.l.pad = rr_below(s, 16) == 0;
	}
	ret = ioctl(fd, cmd, &a);
	count(op, ret);
}

/* A valid flow: PD, CQ, two QPs connected, two MRs, a WRITE and its completion. */
static void valid_flow(int fd, uint64_t *s)
{
	struct rnic_create_qp qp = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
				     .max_recv_sge = 1 };
	struct rnic_reg_mr mr = { .length = 65536, .access = 7 };
	struct rnic_send_wr wr;
	struct rnic_wc wc;
	struct rnic_post post = { .num_wr = 1, .wrs = (uintptr_t)&wr };
	struct rnic_poll_cq poll = { .num_entries = 1, .wcs = (uintptr_t)&wc, .timeout_ms = 200 };
	struct rnic_alloc_pd pd = { 0 };
	struct rnic_create_cq cq = { .entries = 64 };
	uint32_t a, lkey;
	bool gpu = rr_below(s, 3) == 0 && P.gpu;

	__atomic_fetch_add(&sh->flows, 1, __ATOMIC_RELAXED);
	if (ioctl(fd, RNIC_IOCTL_ALLOC_PD, &pd) || ioctl(fd, RNIC_IOCTL_CREATE_CQ, &cq))
		return;
	qp.pd = pd.pd;
	qp.send_cqn = qp.recv_cqn = cq.cqn;
	mr.pd = pd.pd;
	mr.addr = (uintptr_t)P.host + (rr_below(s, HOST_BUF / 65536 - 1) << 16);
	if (ioctl(fd, RNIC_IOCTL_CREATE_QP, &qp))
		return;
	a = qp.qpn;
	if (ioctl(fd, RNIC_IOCTL_CREATE_QP, &qp) || ioctl(fd, RNIC_IOCTL_REG_MR, &mr))
		return;
	lkey = mr.lkey;
	remember(ID_PD, pd.pd, s);
	remember(ID_CQ, cq.cqn, s);
	remember(ID_QP, a, s);
	remember(ID_MR, mr.index, s);
	if (gpu)
		mr.addr = (uintptr_t)P.gpu;
	mr.access = 7;
	if (ioctl(fd, RNIC_IOCTL_REG_MR, &mr) ||
	    rv_modify_qp(fd, a, RNIC_QPS_INIT, RNIC_QP_ATTR_ACCESS, 0, 6, 0, 0) ||
	    rv_modify_qp(fd, qp.qpn, RNIC_QPS_INIT, RNIC_QP_ATTR_ACCESS, 0, 6, 0, 0) ||
	    rv_modify_qp(fd, a, RNIC_QPS_RTR, RNIC_QP_ATTR_DEST_QPN, qp.qpn, 0, 0, 0) ||
	    rv_modify_qp(fd, qp.qpn, RNIC_QPS_RTR, RNIC_QP_ATTR_DEST_QPN, a, 0, 0, 0) ||
	    rv_modify_qp(fd, a, RNIC_QPS_RTS, 0, 0, 0, 0, 0))
		return;
	remember(ID_MR, mr.index, s);
	memset(&wr, 0, sizeof(wr));
	wr.opcode = RNIC_WQE_OP_RDMA_WRITE;
	wr.flags = RNIC_WQE_FLAG_SIGNALED;
	wr.remote_addr = mr.addr;
	wr.rkey = mr.rkey;
	wr.num_sge = 1;
	wr.sge[0].addr = (uintptr_t)P.host;
	wr.sge[0].length = 4096;
	wr.sge[0].lkey = lkey;
	post.qpn = a;
	poll.cqn = cq.cqn;
	if (!ioctl(fd, RNIC_IOCTL_POST_SEND, &post) && !ioctl(fd, RNIC_IOCTL_POLL_CQ, &poll) &&
	    poll.num_polled == 1)
		__atomic_fetch_add(&sh->flows_ok, 1, __ATOMIC_RELAXED);
}

static void *worker_thread(void *arg)
{
	uint64_t s = (uintptr_t)arg;
	int fd;

	while (rs_now_ms() < deadline_ms) {
		uint32_t r = rr_below(&s, 1000);

		if (r < 40) {
			open_fd(P.rnic_fd, rnic_dev, &s);
		} else if (r < 55) {
			open_fd(P.gpu_fd, "/dev/rnic_gpu0", &s);
		} else if (r < 75) {
			close_fd(rr_below(&s, 3) ? P.rnic_fd : P.gpu_fd, &s);
		} else if (r < 80) {
			remap_gpu();
		} else if (r < 130) {
			fd = get_fd(P.rnic_fd, &s);
			if (fd >= 0)
				valid_flow(fd, &s);
		} else if (r < 140) {
			/* An unknown command, and a known one with a wrong size: -ENOTTY. */
			fd = get_fd(rr_below(&s, 2) ? P.rnic_fd : P.gpu_fd, &s);
			if (fd >= 0) {
				uint8_t buf[256] = { 0 };

				count(OP_BAD_CMD,
				      ioctl(fd, rr_below(&s, 2) ?
						_IOWR('R', 0x40 + rr_below(&s, 64), uint64_t) :
						_IOWR('R', 0x10, struct rnic_poll_cq), buf));
			}
		} else if (r < 800) {
			fd = get_fd(P.rnic_fd, &s);
			if (fd >= 0)
				rnic_op(fd, &s);
		} else {
			fd = get_fd(P.gpu_fd, &s);
			if (fd >= 0)
				gpu_op(fd, &s);
		}
	}
	return NULL;
}

static void worker(uint64_t seed, unsigned int threads)
{
	pthread_t t[16];
	unsigned int i;

	/* The helpers print every failed call; here most calls are meant to fail. */
	if (!freopen("/dev/null", "w", stderr))
		_exit(3);
	memset(&P, 0, sizeof(P));
	pthread_mutex_init(&P.gpu_lock, NULL);
	for (i = 0; i < NFD; i++)
		P.rnic_fd[i] = P.gpu_fd[i] = -1;
	P.host = rv_alloc_buf(HOST_BUF);
	P.ro = mmap(NULL, HOST_BUF / 4, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	P.hole = mmap(NULL, 1 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!P.host || P.ro == MAP_FAILED || P.hole == MAP_FAILED)
		_exit(3);
	munmap(P.hole, 1 << 20);
	remap_gpu();
	for (i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, worker_thread, (void *)(uintptr_t)(seed * 1000003 + i));
	for (i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	for (i = 0; i < NFD; i++) {
		if (P.rnic_fd[i] >= 0)
			close(P.rnic_fd[i]);
		if (P.gpu_fd[i] >= 0)
			close(P.gpu_fd[i]);
	}
	_exit(0);
}

/* PCI address of /dev/rnic_emuN or of the first GPU, into bdf[32]; 0 or -1. */
static int find_bdf(bool gpu, char *bdf)
{
	struct rv_gpu g;
	char link[256];

	if (!gpu) {
		rv_dev_sysfs(rnic_dev, link, sizeof(link));
		return rs_link_bdf(link, bdf, 32);
	}
	if (rv_gpu_open(0, &g))
		return -1;
	close(g.fd);
	snprintf(bdf, 32, "%s", g.pci);
	return 0;
}

/* One removal cycle; false if a write did not finish within CYCLE_WAIT_MS. */
static bool cycle(bool gpu, const char *bdf)
{
	struct rs_bg_write w;
	char path[128];
	long ms;

	if (gpu)
		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/remove", bdf);
	else
		snprintf(path, sizeof(path), "/sys/bus/pci/drivers/rnic_emu/unbind");
	if (rs_bg_write_start(&w, path, gpu ? "1" : bdf))
		return true;
	ms = rs_bg_write_wait(&w, CYCLE_WAIT_MS);
	if (ms < 0) {
		printf("cycle_blocked: %s %s\n", gpu ? "gpu remove" : "rnic unbind", bdf);
		return false;
	}
	rs_sleep_ms(200);
	if (gpu)
		snprintf(path, sizeof(path), "/sys/bus/pci/rescan");
	else
		snprintf(path, sizeof(path), "/sys/bus/pci/drivers/rnic_emu/bind");
	if (rs_bg_write_start(&w, path, gpu ? "1" : bdf))
		return true;
	if (rs_bg_write_wait(&w, CYCLE_WAIT_MS) < 0) {
		printf("cycle_blocked: %s %s\n", gpu ? "rescan" : "rnic bind", bdf);
		return false;
	}
	return true;
}

int main(int argc, char **argv)
{
	unsigned int seconds = 120, procs = 3, threads = 3, cycle_ms = 3000, i, ncycles[2] = { 0 };
	uint64_t seed = 1, total = 0;
	bool cycles = true, ok = true;
	char bdf[2][32];
	pthread_mutexattr_t ma;
	pid_t pids[32];
	int opt, st, bad, stuck = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "s:t:p:j:c:nd:")) != -1) {
		switch (opt) {
		case 's': seed = strtoull(optarg, NULL, 0); break;
		case 't': seconds = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'p': procs = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'j': threads = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'c': cycle_ms = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'n': cycles = false; break;
		case 'd': rnic_dev = optarg; break;
		default: goto usage;
		}
	}
	if (optind != argc || !procs || procs > 32 || !threads || threads > 16 || !seconds)
		goto usage;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	memset(sh, 0, sizeof(*sh));
	if (pthread_mutexattr_init(&ma) || pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED) ||
	    pthread_mutex_init(&sh->map_lock, &ma))
		return 1;
	rs_hung_task_timeout(20);
	if (find_bdf(false, bdf[0])) {
		fprintf(stderr, "error: no RNIC at %s\n", rnic_dev);
		return 1;
	}
	bdf[1][0] = 0;
	find_bdf(true, bdf[1]);
	printf("seed: %llu\nseconds: %u\nprocs: %u\nthreads: %u\n", (unsigned long long)seed,
	       seconds, procs, threads);

	deadline_ms = rs_now_ms() + (uint64_t)seconds * 1000;
	for (i = 0; i < procs; i++) {
		pids[i] = fork();
		if (pids[i] == 0)
			worker(seed * 7919 + i, threads);
	}
	/* Removal cycles while the workers run: GPU remove/rescan, RNIC unbind/bind. */
	for (i = 0; cycles && ok && rs_now_ms() + cycle_ms < deadline_ms; i++) {
		bool gpu = (i & 1) && bdf[1][0];

		rs_sleep_ms(cycle_ms);
		ok = cycle(gpu, gpu ? bdf[1] : bdf[0]);
		ncycles[gpu]++;
	}
	/* Workers end at the deadline; a stuck one is a failure (and may never exit). */
	for (i = 0; i < procs; i++) {
		uint64_t until = deadline_ms + 60000;

		while (waitpid(pids[i], &st, WNOHANG) == 0) {
			if (rs_now_ms() > until) {
				printf("worker_stuck: %u\n", i);
				kill(pids[i], SIGKILL);
				stuck++;
				break;
			}
			rs_sleep_ms(100);
		}
	}
	for (i = 0; i < OP_COUNT; i++) {
		printf("ioctl_%s: %lu calls %lu ok\n", op_names[i], sh->calls[i], sh->ok[i]);
		total += sh->calls[i];
	}
	printf("ops: %llu\nopens: %lu\ncloses: %lu\nvalid_flows: %lu\nvalid_flows_ok: %lu\n",
	       (unsigned long long)total, sh->opens, sh->closes, sh->flows, sh->flows_ok);
	printf("cycles_rnic: %u\ncycles_gpu: %u\n", ncycles[0], ncycles[1]);
	printf("cycle_blocked_any: %d\nworkers_stuck: %d\n", !ok, stuck);
	bad = rs_kmsg_scan();
	printf("kmsg_bad_lines: %d\n", bad);
	ok = ok && !stuck && !bad;
	printf("result: %s\n", ok ? "PASS" : "FAIL");
	return ok ? 0 : 1;
usage:
	fprintf(stderr, "usage: rnic-ioctl-stress [-s SEED] [-t SECONDS] [-p PROCS] [-j THREADS] [-c CYCLE_MS] [-n] [-d DEV]\n");
	return 2;
}
