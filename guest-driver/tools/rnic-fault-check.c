// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-fault-check: one verbs operation on /dev/rnic_emuN while the host injects a PCIe
 * fault (docs/faults.md), reporting exactly what user space sees: the completion's status
 * and syndrome, the errno of each call, the destination bytes, the QP state, the time it
 * took. Static, libc only.
 *
 *   rnic-fault-check [--kv NAME] [--dev /dev/rnic_emuN] [--timeout MS] write|query|wait
 *
 * Setup: a PD, a CQ, one QP connected to itself, a 4 KiB source and destination buffer
 * (one page each) registered as MRs. With --kv NAME the tool then publishes the buffers'
 * bus addresses (from /proc/self/pagemap: the guest has no IOMMU) as ready.NAME =
 * "SRC,DST" in the rendezvous store and waits for go.NAME, so the host injects the fault
 * between setup and the operation:
 *   write  one signaled RDMA WRITE src -> dst (pattern), polled with the timeout; then a
 *          second poll of 500 ms that must find nothing (a duplicate would show here);
 *   query  QUERY_QP (a device command);
 *   wait   one RECV posted, then a poll with the timeout: work outstanding and a caller
 *          asleep when the host injects (it does so after go.NAME for this one).
 * Output: "scenario: NAME" then "key: value" lines. Exit 0 when the run could report
 * (whatever the fault did), 2 on a usage or setup error.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdlib.h>

#include "rnic_tool_kv.h"
#include "rnic_tool_verbs.h"

#define FC_LEN		4096u
#define FC_SEED		0x5eed

static int bus_addr(const void *va, unsigned long long *bus)
{
	uint64_t entry = 0;
	long page = sysconf(_SC_PAGESIZE);
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	off_t off = (off_t)((uintptr_t)va / (uintptr_t)page) * 8;

	if (fd < 0)
		return -1;
	if (pread(fd, &entry, sizeof(entry), off) != (ssize_t)sizeof(entry) ||
	    !(entry & (1ull << 63)) || !(entry & ((1ull << 55) - 1))) {
		close(fd);
		return -1;
	}
	close(fd);
	*bus = (entry & ((1ull << 55) - 1)) * (unsigned long long)page;
	return 0;
}

/* "ok", "untouched" (zeroes), "inverted" (every byte of the pattern flipped) or "corrupt". */
static const char *bytes_state(const uint8_t *p)
{
	bool zero = true, inverted = true;
	uint32_t i;

	if (rv_pattern_check(p, FC_LEN, FC_SEED) == FC_LEN)
		return "ok";
	for (i = 0; i < FC_LEN; i++) {
		zero &= p[i] == 0;
		inverted &= p[i] == (uint8_t)~rv_pattern_byte(i, FC_SEED);
	}
	return zero ? "untouched" : inverted ? "inverted" : "corrupt";
}

static void usage(void)
{
	fprintf(stderr, "usage: rnic-fault-check [--kv NAME] [--dev DEV] [--timeout MS] write|query|wait\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "kv", required_argument, NULL, 'k' },
		{ "dev", required_argument, NULL, 'd' },
		{ "timeout", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	const char *kv = NULL, *dev = RV_DEFAULT_DEV, *op;
	uint32_t timeout_ms = 5000, pd, cqn, access;
	unsigned long long src_bus = 0, dst_bus = 0;
	struct rnic_query_device q;
	struct rnic_create_qp c;
	struct rnic_query_qp qq;
	struct rv_mr src_mr, dst_mr;
	struct rnic_wc wc;
	uint8_t *src, *dst;
	uint64_t t0;
	int fd, ch, n;

	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'k': kv = optarg; break;
		case 'd': dev = optarg; break;
		case 't': timeout_ms = (uint32_t)strtoul(optarg, NULL, 0); break;
		default: usage();
		}
	}
	if (optind + 1 != argc)
		usage();
	op = argv[optind];
	if (strcmp(op, "write") && strcmp(op, "query") && strcmp(op, "wait"))
		usage();
	printf("scenario: %s\n", kv ? kv : op);

	access = RNIC_UACCESS_LOCAL_WRITE | RNIC_UACCESS_REMOTE_WRITE | RNIC_UACCESS_REMOTE_READ;
	fd = rv_open(dev, &q);
	src = rv_alloc_buf(FC_LEN);
	dst = rv_alloc_buf(FC_LEN);
	if (fd < 0 || !src || !dst || rv_alloc_pd(fd, &pd) || rv_create_cq(fd, 16, &cqn) ||
	    rv_reg_mr(fd, pd, src, FC_LEN, access, &src_mr) ||
	    rv_reg_mr(fd, pd, dst, FC_LEN, access, &dst_mr)) {
		printf("setup: failed\n");
		return 2;
	}
	memset(&c, 0, sizeof(c));
	c.pd = pd;
	c.send_cqn = c.recv_cqn = cqn;
	c.max_send_wr = c.max_recv_wr = 4;
	c.max_send_sge = c.max_recv_sge = 1;
	if (rv_create_qp(fd, &c) ||
	    rv_connect_qp(fd, c.qpn, c.qpn, RNIC_UACCESS_REMOTE_WRITE | RNIC_UACCESS_REMOTE_READ, 0, 0)) {
		printf("setup: failed\n");
		return 2;
	}
	rv_pattern_fill(src, FC_LEN, FC_SEED);
	if (bus_addr(src, &src_bus) || bus_addr(dst, &dst_bus))
		fprintf(stderr, "warning: no bus addresses from /proc/self/pagemap\n");
	printf("setup: ok\n");
	if (kv) {
		char key[RKV_MAX_KEY + 1], val[64];

		snprintf(key, sizeof(key), "ready.%s", kv);
		snprintf(val, sizeof(val), "%#llx,%#llx", src_bus, dst_bus);
		if (rkv_put(key, val))
			return 2;
		snprintf(key, sizeof(key), "go.%s", kv);
		if (rkv_get(key, 180000, val, sizeof(val))) {
			printf("kv: no go from the host\n");
			return 2;
		}
	}

	t0 = rv_now_ns();
	if (!strcmp(op, "query")) {
		errno = 0;
		rv_query_qp(fd, c.qpn, &qq);
		printf("query_errno: %s\n", errno ? strerror(errno) : "none");
	} else {
		if (!strcmp(op, "write")) {
			struct rnic_send_wr wr = {
				.wr_id = 1, .opcode = RNIC_UOP_RDMA_WRITE, .flags = RNIC_USEND_SIGNALED,
				.num_sge = 1, .remote_addr = (uintptr_t)dst, .rkey = dst_mr.rkey,
			};

			wr.sge[0].addr = (uintptr_t)src;
			wr.sge[0].length = FC_LEN;
			wr.sge[0].lkey = src_mr.lkey;
			errno = 0;
			rv_post_send(fd, c.qpn, &wr, 1);
		} else {
			struct rnic_recv_wr wr = { .wr_id = 2, .num_sge = 1 };

			wr.sge[0].addr = (uintptr_t)dst;
			wr.sge[0].length = FC_LEN;
			wr.sge[0].lkey = dst_mr.lkey;
			errno = 0;
			rv_post_recv(fd, c.qpn, &wr, 1);
		}
		printf("post_errno: %s\n", errno ? strerror(errno) : "none");
		errno = 0;
		n = rv_poll_cq(fd, cqn, &wc, 1, timeout_ms);
		printf("poll_errno: %s\n", n < 0 ? strerror(errno) : "none");
		printf("polled: %d\n", n);
		if (n == 1) {
			printf("status: %s\n", rv_wc_status_name(wc.status));
			printf("syndrome: %s\n", rv_qp_err_name(wc.syndrome));
		}
		printf("latency_ms: %llu\n", (unsigned long long)((rv_now_ns() - t0) / 1000000));
		if (!strcmp(op, "write")) {
			printf("bytes: %s\n", bytes_state(dst));
			if (n == 1)
				printf("extra: %d\n", rv_poll_cq(fd, cqn, &wc, 1, 500));
		}
	}
	errno = 0;
	if (rv_query_qp(fd, c.qpn, &qq) == 0)
		printf("qp_state: %s\n", rv_qp_state_name(qq.qp_state));
	else
		printf("qp_state: errno %s\n", strerror(errno));
	close(fd);
	return 0;
}
