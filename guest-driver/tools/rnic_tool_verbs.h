/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Small user-space helpers over /dev/rnic_emuN (include/uapi/rnic_emu_uapi.h), shared by
 * rnic-perf and rnic-verbs-check. Header-only so each tool stays one static binary.
 * Every helper prints what failed (to stderr) and returns -1; success is 0.
 */
#ifndef RNIC_TOOL_VERBS_H
#define RNIC_TOOL_VERBS_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "uapi/rnic_emu_gpu_uapi.h"
#include "uapi/rnic_emu_regs.h"
#include "uapi/rnic_emu_uapi.h"

#define RV_DEFAULT_DEV "/dev/rnic_emu0"

/* A size with an optional k/m/g suffix (powers of two); -1 when it does not parse. */
static inline int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		return -1;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end)
		return -1;
	*out = v;
	return 0;
}


static inline int rv_ioctl(int fd, unsigned long req, void *arg, const char *what)
{
	if (ioctl(fd, req, arg) == 0)
		return 0;
	fprintf(stderr, "error: %s: %s\n", what, strerror(errno));
	return -1;
}

static inline const char *rv_wc_status_name(unsigned int s)
{
	switch (s) {
	case RNIC_WC_SUCCESS:		return "SUCCESS";
	case RNIC_WC_LOC_LEN_ERR:	return "LOC_LEN_ERR";
	case RNIC_WC_LOC_QP_OP_ERR:	return "LOC_QP_OP_ERR";
	case RNIC_WC_LOC_PROT_ERR:	return "LOC_PROT_ERR";
	case RNIC_WC_WR_FLUSH_ERR:	return "WR_FLUSH_ERR";
	case RNIC_WC_REM_INV_REQ_ERR:	return "REM_INV_REQ_ERR";
	case RNIC_WC_REM_ACCESS_ERR:	return "REM_ACCESS_ERR";
	case RNIC_WC_REM_OP_ERR:	return "REM_OP_ERR";
#ifdef RNIC_WC_RETRY_EXC_ERR
	case RNIC_WC_RETRY_EXC_ERR:	return "RETRY_EXC_ERR";
#endif
	case RNIC_WC_RNR_RETRY_EXC_ERR:	return "RNR_RETRY_EXC_ERR";
	case RNIC_WC_FATAL_ERR:		return "FATAL_ERR";
	default:			return "UNKNOWN";
	}
}

static inline const char *rv_qp_state_name(unsigned int s)
{
	switch (s) {
	case RNIC_QPS_RESET:	return "RESET";
	case RNIC_QPS_INIT:	return "INIT";
	case RNIC_QPS_RTR:	return "RTR";
	case RNIC_QPS_RTS:	return "RTS";
	case RNIC_QPS_ERR:	return "ERR";
	default:		return "UNKNOWN";
	}
}

static inline const char *rv_cqe_op_name(unsigned int op)
{
	switch (op) {
	case RNIC_CQE_OP_RDMA_WRITE:	return "RDMA_WRITE";
	case RNIC_CQE_OP_RDMA_READ:	return "RDMA_READ";
	case RNIC_CQE_OP_SEND:		return "SEND";
	case RNIC_CQE_OP_RECV:		return "RECV";
	case RNIC_CQE_OP_RECV_RDMA_IMM:	return "RECV_RDMA_WITH_IMM";
	default:			return "UNKNOWN";
	}
}

static inline const char *rv_qp_err_name(unsigned int r)
{
	switch (r) {
	case RNIC_QP_ERR_NONE:		return "NONE";
	case RNIC_QP_ERR_MODIFY:	return "MODIFY";
	case RNIC_QP_ERR_BAD_WQE:	return "BAD_WQE";
	case RNIC_QP_ERR_LOCAL_ACCESS:	return "LOCAL_ACCESS";
	case RNIC_QP_ERR_REMOTE_ACCESS:	return "REMOTE_ACCESS";
	case RNIC_QP_ERR_RNR:		return "RNR";
	case RNIC_QP_ERR_REMOTE_INVALID: return "REMOTE_INVALID";
	case RNIC_QP_ERR_DMA:		return "DMA";
	case RNIC_QP_ERR_CQ:		return "CQ";
	case RNIC_QP_ERR_LENGTH:	return "LENGTH";
	case RNIC_QP_ERR_APERTURE:	return "APERTURE";
#ifdef RNIC_QP_ERR_RETRY
	case RNIC_QP_ERR_RETRY:		return "RETRY";
#endif
	case RNIC_QP_ERR_FATAL:		return "FATAL";
	case RNIC_QP_ERR_POISONED:	return "POISONED";
	default:			return "UNKNOWN";
	}
}

static inline int rv_open(const char *path, struct rnic_query_device *q)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		fprintf(stderr, "error: open %s: %s\n", path, strerror(errno));
		return -1;
	}
	memset(q, 0, sizeof(*q));
	if (rv_ioctl(fd, RNIC_IOCTL_QUERY_DEVICE, q, "QUERY_DEVICE")) {
		close(fd);
		return -1;
	}
	if (q->uapi_version != RNIC_UAPI_VERSION) {
		fprintf(stderr, "error: %s speaks uAPI version %u, this tool %u\n", path,
			q->uapi_version, RNIC_UAPI_VERSION);
		close(fd);
		return -1;
	}
	return fd;
}

static inline int rv_alloc_pd(int fd, uint32_t *pd)
{
	struct rnic_alloc_pd a = { 0 };

	if (rv_ioctl(fd, RNIC_IOCTL_ALLOC_PD, &a, "ALLOC_PD"))
		return -1;
	*pd = a.pd;
	return 0;
}

static inline int rv_create_cq(int fd, uint32_t entries, uint32_t *cqn)
{
	struct rnic_create_cq c = { .entries = entries };

	if (rv_ioctl(fd, RNIC_IOCTL_CREATE_CQ, &c, "CREATE_CQ"))
		return -1;
	*cqn = c.cqn;
	return 0;
}

/* Creates a QP; *c is in/out (see struct rnic_create_qp). */
static inline int rv_create_qp(int fd, struct rnic_create_qp *c)
{
	return rv_ioctl(fd, RNIC_IOCTL_CREATE_QP, c, "CREATE_QP");
}

static inline int rv_modify_qp(int fd, uint32_t qpn, uint32_t state, uint32_t mask, uint32_t dest,
			uint32_t access, uint32_t rnr_retry, uint32_t rnr_timer_us)
{
	struct rnic_modify_qp m = {
		.qpn = qpn, .attr_mask = mask, .qp_state = state, .dest_qpn = dest,
		.access = access, .rnr_retry = rnr_retry, .rnr_timer_us = rnr_timer_us,
	};
	char what[64];

	snprintf(what, sizeof(what), "MODIFY_QP %u to %s", qpn, rv_qp_state_name(state));
	return rv_ioctl(fd, RNIC_IOCTL_MODIFY_QP, &m, what);
}

/* RESET -> INIT -> RTR -> RTS, talking to dest. */
static inline int rv_connect_qp(int fd, uint32_t qpn, uint32_t dest, uint32_t access,
			 uint32_t rnr_retry, uint32_t rnr_timer_us)
{
	if (rv_modify_qp(fd, qpn, RNIC_QPS_INIT, RNIC_QP_ATTR_ACCESS, 0, access, 0, 0) ||
	    rv_modify_qp(fd, qpn, RNIC_QPS_RTR, RNIC_QP_ATTR_DEST_QPN, dest, 0, 0, 0) ||
	    rv_modify_qp(fd, qpn, RNIC_QPS_RTS, RNIC_QP_ATTR_RNR, 0, 0, rnr_retry, rnr_timer_us))
		return -1;
	return 0;
}

/* What a QP needs to talk to a QP of another node (docs/fabric.md). */
struct rv_remote_attr {
	uint32_t dest_qpn;
	uint32_t dest_ip;		/* the peer RNIC's IPv4 (its QUERY_DEVICE ipv4) */
	uint32_t rq_psn;		/* the peer's sq_psn */
	uint32_t sq_psn;		/* ours */
	uint32_t path_mtu;		/* bytes: 256..4096 */
	uint32_t retry_cnt;		/* 0..7 */
	uint32_t timeout;		/* 0..31: 4.096 us * 2^timeout */
	uint32_t rnr_retry;		/* 0..7 (7: forever) */
	uint32_t rnr_timer_us;
};

/* RTR then RTS towards a QP of another node; the QP is in INIT. 0 or -1 (printed). */
static inline int rv_connect_qp_remote(int fd, uint32_t qpn, const struct rv_remote_attr *a)
{
	struct rnic_modify_qp rtr = {
		.qpn = qpn, .qp_state = RNIC_QPS_RTR,
		.attr_mask = RNIC_QP_ATTR_DEST_QPN | RNIC_QP_ATTR_DEST_IP | RNIC_QP_ATTR_RQ_PSN |
			     RNIC_QP_ATTR_PATH_MTU,
		.dest_qpn = a->dest_qpn, .dest_ip = a->dest_ip, .rq_psn = a->rq_psn,
		.path_mtu = a->path_mtu,
	};
	struct rnic_modify_qp rts = {
		.qpn = qpn, .qp_state = RNIC_QPS_RTS,
		.attr_mask = RNIC_QP_ATTR_RNR | RNIC_QP_ATTR_SQ_PSN | RNIC_QP_ATTR_RETRY_CNT |
			     RNIC_QP_ATTR_TIMEOUT,
		.rnr_retry = a->rnr_retry, .rnr_timer_us = a->rnr_timer_us, .sq_psn = a->sq_psn,
		.retry_cnt = a->retry_cnt, .timeout = a->timeout,
	};
	char what[64];

	snprintf(what, sizeof(what), "MODIFY_QP %u to RTR (remote QP %u)", qpn, a->dest_qpn);
	if (rv_ioctl(fd, RNIC_IOCTL_MODIFY_QP, &rtr, what))
		return -1;
	snprintf(what, sizeof(what), "MODIFY_QP %u to RTS", qpn);
	return rv_ioctl(fd, RNIC_IOCTL_MODIFY_QP, &rts, what);
}

/* a.b.c.d of a host-order IPv4 address, into buf[16]. */
static inline const char *rv_ipv4_str(uint32_t ip, char *buf)
{
	snprintf(buf, 16, "%u.%u.%u.%u", ip >> 24, (ip >> 16) & 0xff, (ip >> 8) & 0xff, ip & 0xff);
	return buf;
}

/* Parses a.b.c.d (decimal, each 0..255) into a host-order address; 0 or -1. */
static inline int rv_parse_ipv4(const char *s, uint32_t *ip)
{
	unsigned int a, b, c, d;
	char tail;

	if (sscanf(s, "%3u.%3u.%3u.%3u%c", &a, &b, &c, &d, &tail) != 4 ||
	    a > 255 || b > 255 || c > 255 || d > 255)
		return -1;
	*ip = a << 24 | b << 16 | c << 8 | d;
	return 0;
}

static inline int rv_query_qp(int fd, uint32_t qpn, struct rnic_query_qp *q)
{
	memset(q, 0, sizeof(*q));
	q->qpn = qpn;
	return rv_ioctl(fd, RNIC_IOCTL_QUERY_QP, q, "QUERY_QP");
}

struct rv_mr {
	void *addr;
	uint64_t length;
	uint32_t lkey, rkey, index;
	uint32_t path;			/* RNIC_MR_PATH_* */
};

/* REG_MR with RNIC_MR_FLAG_* flags; mr->path says how the RNIC reaches the memory. */
static inline int rv_reg_mr_flags(int fd, uint32_t pd, void *addr, uint64_t length,
				  uint32_t access, uint32_t flags, struct rv_mr *mr)
{
	struct rnic_reg_mr r = {
		.addr = (uintptr_t)addr, .length = length, .access = access, .pd = pd,
		.flags = flags,
	};

	if (rv_ioctl(fd, RNIC_IOCTL_REG_MR, &r, "REG_MR"))
		return -1;
	mr->addr = addr;
	mr->length = length;
	mr->lkey = r.lkey;
	mr->rkey = r.rkey;
	mr->index = r.index;
	mr->path = r.path;
	return 0;
}

static inline int rv_reg_mr(int fd, uint32_t pd, void *addr, uint64_t length, uint32_t access,
		     struct rv_mr *mr)
{
	return rv_reg_mr_flags(fd, pd, addr, length, access, 0, mr);
}

static inline const char *rv_mr_path_name(uint32_t path)
{
	switch (path) {
	case RNIC_MR_PATH_HOST:			return "host";
	case RNIC_MR_PATH_P2P_SWITCH:		return "p2p-switch";
	case RNIC_MR_PATH_P2P_HOST_BRIDGE:	return "p2p-host-bridge";
	case RNIC_MR_PATH_BOUNCE:		return "bounce";
	default:				return "unknown";
	}
}

/* MR_SYNC (a no-op for MRs that are not bounced). */
static inline int rv_mr_sync(int fd, const struct rv_mr *mr, uint64_t offset, uint64_t length,
			     uint32_t direction)
{
	struct rnic_mr_sync s = {
		.index = mr->index, .direction = direction, .offset = offset, .length = length,
	};

	return rv_ioctl(fd, RNIC_IOCTL_MR_SYNC, &s, "MR_SYNC");
}

/* ---- GPUs: /dev/rnic_gpuN and p2pmem buffers ---- */

struct rv_gpu {
	int fd;
	struct rnic_gpu_query q;
	char pci[32];			/* dddd:bb:dd.f */
};

/* Opens /dev/rnic_gpuN and queries it; 0 or -1 (printed). */
static inline int rv_gpu_open(unsigned int n, struct rv_gpu *g)
{
	char path[64];

	snprintf(path, sizeof(path), "/dev/rnic_gpu%u", n);
	g->fd = open(path, O_RDWR | O_CLOEXEC);
	if (g->fd < 0) {
		fprintf(stderr, "error: open %s: %s\n", path, strerror(errno));
		return -1;
	}
	memset(&g->q, 0, sizeof(g->q));
	if (rv_ioctl(g->fd, RNIC_GPU_IOCTL_QUERY, &g->q, "GPU_QUERY")) {
		close(g->fd);
		return -1;
	}
	if (g->q.uapi_version != RNIC_GPU_UAPI_VERSION) {
		fprintf(stderr, "error: %s speaks GPU uAPI version %u, this tool %u\n", path,
			g->q.uapi_version, RNIC_GPU_UAPI_VERSION);
		close(g->fd);
		return -1;
	}
	snprintf(g->pci, sizeof(g->pci), "%04x:%02x:%02x.%x", g->q.pci_domain, g->q.pci_bus,
		 g->q.pci_devfn >> 3, g->q.pci_devfn & 7);
	return 0;
}

/* len bytes (rounded up to pages) of the GPU's memory: a mapping of p2pmem/allocate. */
static inline void *rv_gpu_alloc(const struct rv_gpu *g, size_t len)
{
	char path[128];
	void *p;
	int fd;

	len = (len + 4095) & ~(size_t)4095;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/p2pmem/allocate", g->pci);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "error: open %s: %s (is BAR1 published as P2PDMA memory?)\n",
			path, strerror(errno));
		return NULL;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		fprintf(stderr, "error: mmap %zu bytes of %s: %s\n", len, path, strerror(errno));
		return NULL;
	}
	return p;
}

/* Offset in the GPU's BAR1 of a virtual address inside its p2pmem mapping. */
static inline int rv_gpu_offset(const struct rv_gpu *g, const void *va, uint64_t *off)
{
	struct rnic_gpu_va_to_offset v = { .va = (uintptr_t)va };

	if (rv_ioctl(g->fd, RNIC_GPU_IOCTL_VA_TO_OFFSET, &v, "GPU_VA_TO_OFFSET"))
		return -1;
	*off = v.offset;
	return 0;
}

/* One line "name value" of a sysfs statistics file; 0 or -1. */
static inline int rv_read_stat(const char *file, const char *name, unsigned long long *val)
{
	char line[128], key[64];
	unsigned long long v;
	FILE *f = fopen(file, "r");
	int ret = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%63s %llu", key, &v) == 2 && !strcmp(key, name)) {
			*val = v;
			ret = 0;
			break;
		}
	fclose(f);
	return ret;
}

/* sysfs directory of the PCI function behind /dev/rnic_emuN: /sys/class/misc/<name>/device. */
static inline void rv_dev_sysfs(const char *dev, char *buf, size_t len)
{
	const char *base = strrchr(dev, '/');

	snprintf(buf, len, "/sys/class/misc/%s/device", base ? base + 1 : dev);
}

/* Page-aligned, zeroed, already faulted-in anonymous memory. */
static inline void *rv_alloc_buf(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		fprintf(stderr, "error: mmap %zu bytes: %s\n", len, strerror(errno));
		return NULL;
	}
	memset(p, 0, len);
	return p;
}

/* POST_SEND or POST_RECV of n work requests; what names the ioctl in the error. */
static inline int rv_post(int fd, unsigned long req, const char *what, uint32_t qpn,
			  const void *wrs, uint32_t n)
{
	struct rnic_post p = { .qpn = qpn, .num_wr = n, .wrs = (uintptr_t)wrs };

	if (ioctl(fd, req, &p) == 0)
		return 0;
	fprintf(stderr, "error: %s QP %u: %s (%u of %u posted)\n", what, qpn, strerror(errno),
		p.num_posted, n);
	return -1;
}

static inline int rv_post_send(int fd, uint32_t qpn, struct rnic_send_wr *wrs, uint32_t n)
{
	return rv_post(fd, RNIC_IOCTL_POST_SEND, "POST_SEND", qpn, wrs, n);
}

static inline int rv_post_recv(int fd, uint32_t qpn, struct rnic_recv_wr *wrs, uint32_t n)
{
	return rv_post(fd, RNIC_IOCTL_POST_RECV, "POST_RECV", qpn, wrs, n);
}

/* Returns the number of completions (0: none within timeout_ms), -1 on error. */
static inline int rv_poll_cq(int fd, uint32_t cqn, struct rnic_wc *wcs, uint32_t n, uint32_t timeout_ms)
{
	struct rnic_poll_cq p = {
		.cqn = cqn, .num_entries = n, .wcs = (uintptr_t)wcs, .timeout_ms = timeout_ms,
	};

	if (rv_ioctl(fd, RNIC_IOCTL_POLL_CQ, &p, "POLL_CQ"))
		return -1;
	return (int)p.num_polled;
}

static inline uint64_t rv_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The byte at offset i of a buffer filled for seed: the rnic-bar pattern. */
static inline uint8_t rv_pattern_byte(uint32_t i, uint32_t seed)
{
	return (uint8_t)((i * 0x9E3779B1u + seed * 0x85EBCA77u) >> 24);
}

static inline void rv_pattern_fill(uint8_t *p, size_t len, uint32_t seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = rv_pattern_byte((uint32_t)i, seed);
}

/* Index of the first byte that differs from the pattern, or len. */
static inline size_t rv_pattern_check(const uint8_t *p, size_t len, uint32_t seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (p[i] != rv_pattern_byte((uint32_t)i, seed))
			return i;
	return len;
}

#endif /* RNIC_TOOL_VERBS_H */
