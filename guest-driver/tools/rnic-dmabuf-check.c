// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-dmabuf-check: GPU memory registered with libibverbs as a dma-buf (docs/gpudirect.md,
 * docs/ibverbs.md). Built against libibverbs by images/build.sh (inside rdma-core's source
 * tree, next to our provider), not by the Makefile's static tools.
 *
 *   rnic-dmabuf-check target [-s SIZE]   GPU memory: a p2pmem mapping of /dev/rnic_gpu0's
 *       GPU, exported as a dma-buf (GPU_EXPORT_DMABUF) and registered on rnic0 with
 *       ibv_reg_dmabuf_mr; an RC QP waits for the peer's RDMA WRITEs, then every byte is
 *       checked in GPU memory (through the mapping) and the RNIC's DMA counters are printed
 *   rnic-dmabuf-check writer [-s SIZE]   the peer: RDMA-WRITEs SIZE pattern bytes from host
 *       memory into the target's dma-buf MR
 *   rnic-dmabuf-check refused [-s SIZE]  single node: ibv_reg_dmabuf_mr must fail (the GPU
 *       is not reachable peer-to-peer); prints the errno and the driver's counters
 *   rnic-dmabuf-check revoke [-s SIZE]   single node: malformed exports and registrations
 *       (EINVAL), then with a dma-buf MR registered, unbinds the GPU (must complete: the MR
 *       is revoked), deregisters, registers the buffer again (ENODEV: its GPU is gone),
 *       rebinds the GPU
 *
 * The two sides meet through the host rendezvous store (rnic_tool_kv.h): the target puts
 * "dmabuf-target" (QPN, GID, iova, rkey), the writer puts "dmabuf-writer" (QPN, GID) and,
 * once its WRITEs completed, "dmabuf-done". Output lines are "dmabuf-<what>: <value>";
 * exit status 0 when the check passed.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rnic_tool_kv.h"
#include "rnic_tool_verbs.h"

#define DEV_NAME	"rnic0"
#define GID_INDEX	1		/* RoCE v2 ::ffff:<node address> (docs/ibverbs.md) */
#define MR_IOVA		0x40000000ull	/* the dma-buf MR's iova (page-aligned, as its offset) */
#define SEED		0x5eed
#define KV_MS		120000u

struct ctx {
	struct ibv_context *ibv;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	union ibv_gid gid;
	char stats[128], drv_stats[128];
};

static int fail(const char *what)
{
	fprintf(stderr, "error: %s: %s\n", what, strerror(errno));
	return -1;
}

static int open_dev(struct ctx *c)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	int i;

	if (!list)
		return fail("ibv_get_device_list");
	for (i = 0; list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), DEV_NAME))
			c->ibv = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!c->ibv)
		return fail("ibv_open_device " DEV_NAME);
	snprintf(c->stats, sizeof(c->stats), "/sys/class/infiniband/%s/device/stats", DEV_NAME);
	snprintf(c->drv_stats, sizeof(c->drv_stats), "/sys/class/infiniband/%s/device/driver_stats",
		 DEV_NAME);
	c->pd = ibv_alloc_pd(c->ibv);
	if (!c->pd)
		return fail("ibv_alloc_pd");
	return 0;
}

/* CQ, RC QP in INIT, and the port's RoCE v2 GID. */
static int make_qp(struct ctx *c)
{
	struct ibv_qp_init_attr init = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.sq_sig_all = 0,
	};
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE,
	};

	c->cq = ibv_create_cq(c->ibv, 16, NULL, NULL, 0);
	if (!c->cq)
		return fail("ibv_create_cq");
	init.send_cq = init.recv_cq = c->cq;
	c->qp = ibv_create_qp(c->pd, &init);
	if (!c->qp)
		return fail("ibv_create_qp");
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		return fail("ibv_modify_qp INIT");
	if (ibv_query_gid(c->ibv, 1, GID_INDEX, &c->gid))
		return fail("ibv_query_gid");
	return 0;
}

static void gid_hex(const union ibv_gid *g, char *out)
{
	int i;

	for (i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", g->raw[i]);
}

static int gid_parse(const char *s, union ibv_gid *g)
{
	int i;
	unsigned int b;

	for (i = 0; i < 16; i++) {
		if (sscanf(s + 2 * i, "%2x", &b) != 1)
			return -1;
		g->raw[i] = b;
	}
	return 0;
}

/* INIT -> RTR -> RTS towards the peer's QP and GID. */
static int connect_qp(struct ctx *c, uint32_t dest_qpn, const union ibv_gid *dgid)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest_qpn,
		.rq_psn = 0, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = *dgid, .sgid_index = GID_INDEX, .hop_limit = 64 } },
	};

	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		return fail("ibv_modify_qp RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		return fail("ibv_modify_qp RTS");
	return 0;
}

/* GPU memory of /dev/rnic_gpu0 (len bytes, one contiguous BAR1 range) and its offset. */
static uint8_t *gpu_mem(struct rv_gpu *g, size_t len, uint64_t *off)
{
	uint8_t *p;
	uint64_t last;

	if (rv_gpu_open(0, g))
		return NULL;
	p = rv_gpu_alloc(g, len);
	if (!p || rv_gpu_offset(g, p, off) || rv_gpu_offset(g, p + len - 4096, &last))
		return NULL;
	if (last != *off + len - 4096) {
		fprintf(stderr, "error: the p2pmem mapping is not one BAR1 range\n");
		return NULL;
	}
	return p;
}

static int export_dmabuf(const struct rv_gpu *g, uint64_t off, uint64_t len)
{
	struct rnic_gpu_export_dmabuf e = { .offset = off, .length = len,
					    .flags = RNIC_GPU_DMABUF_CLOEXEC };

	if (rv_ioctl(g->fd, RNIC_GPU_IOCTL_EXPORT_DMABUF, &e, "GPU_EXPORT_DMABUF"))
		return -1;
	printf("dmabuf-export: fd %d, BAR1 offset 0x%" PRIx64 ", %" PRIu64 " bytes\n", e.fd, off, len);
	return e.fd;
}

static unsigned long long stat_of(const char *file, const char *name)
{
	unsigned long long v = ~0ull;

	if (rv_read_stat(file, name, &v))
		fprintf(stderr, "error: no %s in %s\n", name, file);
	return v;
}

static int run_target(uint64_t size)
{
	static const char *const names[] = { "dma_host_bytes", "dma_p2p_switch_bytes",
					     "dma_p2p_root_complex_bytes" };
	unsigned long long before[3], after[3];
	char val[RKV_MAX_VALUE], gid[33];
	union ibv_gid peer_gid;
	struct ctx c = {};
	struct rv_gpu g;
	struct ibv_mr *mr;
	uint64_t off;
	uint32_t peer_qpn;
	uint8_t *gpu;
	size_t bad, i;	/* bad: the first byte that differs (size: none) */
	int fd;

	gpu = gpu_mem(&g, size, &off);
	if (!gpu)
		return 1;
	memset(gpu, 0, size);	/* zeroed GPU memory: the check sees only the WRITEs */
	fd = export_dmabuf(&g, off, size);
	if (fd < 0 || open_dev(&c))
		return 1;
	mr = ibv_reg_dmabuf_mr(c.pd, 0, size, MR_IOVA, fd,
			       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr)
		return fail("ibv_reg_dmabuf_mr"), 1;
	printf("dmabuf-mr: rkey 0x%x, iova 0x%llx, %" PRIu64 " bytes\n", mr->rkey, MR_IOVA, size);
	if (make_qp(&c))
		return 1;
	gid_hex(&c.gid, gid);
	snprintf(val, sizeof(val), "%u:%s:%llx:%x", c.qp->qp_num, gid, MR_IOVA, mr->rkey);
	if (rkv_put("dmabuf-target", val) || rkv_get("dmabuf-writer", KV_MS, val, sizeof(val)))
		return 1;
	if (sscanf(val, "%u:%32s", &peer_qpn, gid) != 2 || gid_parse(gid, &peer_gid)) {
		fprintf(stderr, "error: bad peer record %s\n", val);
		return 1;
	}
	for (i = 0; i < 3; i++)
		before[i] = stat_of(c.stats, names[i]);
	if (connect_qp(&c, peer_qpn, &peer_gid) || rkv_put("dmabuf-ready", "1") ||
	    rkv_get("dmabuf-done", KV_MS, val, sizeof(val)))
		return 1;
	for (i = 0; i < 3; i++) {
		after[i] = stat_of(c.stats, names[i]);
		printf("dmabuf-%s: %llu\n", names[i], after[i] - before[i]);
	}
	/* Every byte, read back from GPU memory through the p2pmem mapping. */
	bad = rv_pattern_check(gpu, size, SEED);
	printf("dmabuf-verified: %zu of %" PRIu64 " bytes\n", bad, size);
	if (ibv_dereg_mr(mr))
		return fail("ibv_dereg_mr"), 1;
	close(fd);
	return bad == size ? 0 : 1;
}

static int run_writer(uint64_t size)
{
	char val[RKV_MAX_VALUE], gid[33];
	unsigned long long iova;
	union ibv_gid peer_gid;
	struct ibv_wc wc;
	struct ctx c = {};
	struct ibv_mr *mr;
	uint32_t peer_qpn, rkey, n = 4, k;
	uint64_t chunk = size / n;
	uint8_t *buf;
	int polled;

	buf = rv_alloc_buf(size);
	if (!buf || open_dev(&c))
		return 1;
	rv_pattern_fill(buf, size, SEED);
	mr = ibv_reg_mr(c.pd, buf, size, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		return fail("ibv_reg_mr"), 1;
	if (make_qp(&c) || rkv_get("dmabuf-target", KV_MS, val, sizeof(val)))
		return 1;
	if (sscanf(val, "%u:%32[0-9a-f]:%llx:%x", &peer_qpn, gid, &iova, &rkey) != 4 ||
	    gid_parse(gid, &peer_gid)) {
		fprintf(stderr, "error: bad target record %s\n", val);
		return 1;
	}
	gid_hex(&c.gid, gid);
	snprintf(val, sizeof(val), "%u:%s", c.qp->qp_num, gid);
	if (connect_qp(&c, peer_qpn, &peer_gid) || rkv_put("dmabuf-writer", val) ||
	    rkv_get("dmabuf-ready", KV_MS, val, sizeof(val)))
		return 1;
	/* n WRITEs of size/n bytes, the last one signaled. */
	for (k = 0; k < n; k++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf + k * chunk, .length = chunk,
				       .lkey = mr->lkey };
		struct ibv_send_wr wr = {
			.wr_id = k, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
			.send_flags = k == n - 1 ? IBV_SEND_SIGNALED : 0,
			.wr = { .rdma = { .remote_addr = iova + k * chunk, .rkey = rkey } },
		}, *bad;

		if (ibv_post_send(c.qp, &wr, &bad))
			return fail("ibv_post_send"), 1;
	}
	for (k = 0; k < 600000; k++) {	/* up to about a minute under TCG */
		polled = ibv_poll_cq(c.cq, 1, &wc);
		if (polled)
			break;
		usleep(100);
	}
	if (polled != 1 || wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "error: WRITE completion: polled %d, status %s\n", polled,
			polled == 1 ? ibv_wc_status_str(wc.status) : "none");
		return 1;
	}
	printf("dmabuf-written: %" PRIu64 " bytes in %u WRITEs\n", size, n);
	if (rkv_put("dmabuf-done", "1"))
		return 1;
	ibv_dereg_mr(mr);
	return 0;
}

static int run_refused(uint64_t size)
{
	unsigned long long fallbacks, failures;
	struct ctx c = {};
	struct rv_gpu g;
	struct ibv_mr *mr;
	uint64_t off;
	int fd, err;

	if (!gpu_mem(&g, size, &off))
		return 1;
	fd = export_dmabuf(&g, off, size);
	if (fd < 0 || open_dev(&c))
		return 1;
	fallbacks = stat_of(c.drv_stats, "p2p_fallbacks");
	failures = stat_of(c.drv_stats, "mr_reg_failures");
	mr = ibv_reg_dmabuf_mr(c.pd, 0, size, MR_IOVA, fd,
			       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	err = errno;
	if (mr) {
		printf("dmabuf-refused: no (registered, rkey 0x%x)\n", mr->rkey);
		return 1;
	}
	printf("dmabuf-refused: errno %d (%s)\n", err, strerror(err));
	printf("dmabuf-p2p_fallbacks: %llu\n", stat_of(c.drv_stats, "p2p_fallbacks") - fallbacks);
	printf("dmabuf-mr_reg_failures: %llu\n", stat_of(c.drv_stats, "mr_reg_failures") - failures);
	close(fd);
	return 0;
}

static int sysfs_write(const char *path, const char *val)
{
	FILE *f = fopen(path, "w");
	int ret;

	if (!f)
		return fail(path);
	ret = fputs(val, f) < 0 ? -1 : 0;
	if (fclose(f) || ret)
		return fail(path);
	return 0;
}

/* errno of GPU_EXPORT_DMABUF for a range or flags, as a name (OK when it succeeded). */
static const char *export_errno(const struct rv_gpu *g, uint64_t off, uint64_t len, uint32_t flags)
{
	struct rnic_gpu_export_dmabuf e = { .offset = off, .length = len, .flags = flags };

	if (!ioctl(g->fd, RNIC_GPU_IOCTL_EXPORT_DMABUF, &e)) {
		close(e.fd);
		return "OK";
	}
	return errno == EINVAL ? "EINVAL" : strerror(errno);
}

static const char *reg_errno(struct ctx *c, int fd, uint64_t off, uint64_t len, uint64_t iova)
{
	struct ibv_mr *mr = ibv_reg_dmabuf_mr(c->pd, off, len, iova, fd, IBV_ACCESS_LOCAL_WRITE);

	if (mr) {
		ibv_dereg_mr(mr);
		return "OK";
	}
	return errno == EINVAL ? "EINVAL" : errno == ENODEV ? "ENODEV" : strerror(errno);
}

/*
 * Malformed requests: exports with an unaligned offset or length, an empty or oversized
 * range, unknown flags; registrations whose iova and offset differ within a page, or
 * that go past the buffer. All EINVAL.
 */
static void bad_inputs(const struct rv_gpu *g, struct ctx *c, int fd, uint64_t size)
{
	uint64_t bar = g->q.bar1_size;

	printf("dmabuf-bad-export: %s %s %s %s %s\n", export_errno(g, 1, size, 0),
	       export_errno(g, 0, size + 1, 0), export_errno(g, 0, 0, 0),
	       export_errno(g, bar - 4096, 8192, 0), export_errno(g, 0, size, 0x2));
	printf("dmabuf-bad-reg: %s %s\n", reg_errno(c, fd, 4096 + 8, 4096, MR_IOVA),
	       reg_errno(c, fd, 0, size + 4096, MR_IOVA));
}

static int run_revoke(uint64_t size)
{
	unsigned long long revoked;
	struct ctx c = {};
	struct rv_gpu g;
	struct ibv_mr *mr;
	uint64_t off;
	uint8_t *gpu;
	int fd, ret;

	gpu = gpu_mem(&g, size, &off);
	if (!gpu)
		return 1;
	fd = export_dmabuf(&g, off, size);
	if (fd < 0 || open_dev(&c))
		return 1;
	bad_inputs(&g, &c, fd, size);
	mr = ibv_reg_dmabuf_mr(c.pd, 0, size, MR_IOVA, fd, IBV_ACCESS_REMOTE_WRITE |
			       IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		return fail("ibv_reg_dmabuf_mr"), 1;
	revoked = stat_of(c.drv_stats, "revoked_mrs");
	/*
	 * The GPU goes away under the live MR: its removal revokes the MR and must not wait for
	 * it. The p2pmem mapping goes first (the P2PDMA teardown waits for mapped pages; the
	 * dma-buf does not need it).
	 */
	munmap(gpu, size);
	close(g.fd);
	if (sysfs_write("/sys/bus/pci/drivers/rnic_emu_gpu/unbind", g.pci))
		return 1;
	printf("dmabuf-unbind: done\n");
	printf("dmabuf-revoked_mrs: %llu\n", stat_of(c.drv_stats, "revoked_mrs") - revoked);
	ret = ibv_dereg_mr(mr);
	printf("dmabuf-dereg: %d\n", ret);
	/* The buffer outlives its GPU, but nothing can import it any more. */
	printf("dmabuf-reg-after-unbind: %s\n", reg_errno(&c, fd, 0, size, MR_IOVA));
	close(fd);
	if (sysfs_write("/sys/bus/pci/drivers/rnic_emu_gpu/bind", g.pci))
		return 1;
	printf("dmabuf-rebind: done\n");
	return ret ? 1 : 0;
}

int main(int argc, char **argv)
{
	uint64_t size = 1 << 20;
	int opt;

	if (argc < 2) {
		fprintf(stderr, "usage: rnic-dmabuf-check target|writer|refused|revoke [-s SIZE]\n");
		return 2;
	}
	optind = 2;
	while ((opt = getopt(argc, argv, "s:")) != -1) {
		if (opt != 's' || parse_size(optarg, &size) || !size || size % (4 * 4096)) {
			fprintf(stderr, "error: -s SIZE (a multiple of 16 KiB)\n");
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(argv[1], "target"))
		return run_target(size);
	if (!strcmp(argv[1], "writer"))
		return run_writer(size);
	if (!strcmp(argv[1], "refused"))
		return run_refused(size);
	if (!strcmp(argv[1], "revoke"))
		return run_revoke(size);
	fprintf(stderr, "error: unknown mode %s\n", argv[1]);
	return 2;
}
