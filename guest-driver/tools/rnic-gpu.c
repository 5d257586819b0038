// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-gpu: run the rnic-emu GPU's engine (fill, copy, f32 reduce) on GPU memory and check
 * the result with the CPU. Static, libc only.
 *
 *   rnic-gpu fill|copy|reduce [-s SIZE] [-g N]
 *   rnic-gpu errors [-g N]
 *   rnic-gpu info [-g N]
 *
 * Buffers are mappings of /sys/bus/pci/devices/<gpu>/p2pmem/allocate (P2PDMA memory of
 * /dev/rnic_gpuN); GPU_VA_TO_OFFSET turns them into BAR1 offsets for GPU_LAUNCH. Output is
 * "key: value" lines for a test harness. Exit status: 0 ok (for `errors`: the scenario
 * ran), 1 a failure (launch error, mismatch), 2 bad usage.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdlib.h>

#include "rnic_tool_verbs.h"

#define FILL_VALUE	0xc0ffee11u

static const char *eng_result_name(uint32_t r)
{
	switch (r) {
	case GPU_ENG_OK:		return "OK";
	case GPU_ENG_ERR_BAD_OP:	return "BAD_OP";
	case GPU_ENG_ERR_RANGE:		return "RANGE";
	case GPU_ENG_ERR_ALIGN:		return "ALIGN";
	case GPU_ENG_ERR_BUSY:		return "BUSY";
	case GPU_ENG_ERR_FATAL:		return "FATAL";
	default:			return "UNKNOWN";
	}
}

static const char *errno_name(int e)
{
	switch (e) {
	case 0:		return "OK";
	case EINVAL:	return "EINVAL";
	case EBUSY:	return "EBUSY";
	case ETIMEDOUT:	return "ETIMEDOUT";
	case EFAULT:	return "EFAULT";
	case ENODEV:	return "ENODEV";
	case EINTR:	return "EINTR";
	default:	return "EOTHER";
	}
}

/* Runs one op; returns 0 or the errno, *result the engine's result code. */
static int launch(const struct rv_gpu *g, uint32_t op, uint64_t src, uint64_t src2,
		  uint64_t dst, uint64_t len, uint32_t value, uint32_t *result)
{
	struct rnic_gpu_launch l = {
		.op = op, .value = value, .src = src, .src2 = src2, .dst = dst, .len = len,
	};
	int ret = ioctl(g->fd, RNIC_GPU_IOCTL_LAUNCH, &l) ? errno : 0;

	*result = l.result;
	return ret;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rnic-gpu fill|copy|reduce [-s SIZE] [-g N]\n"
		"       rnic-gpu errors [-g N]     an out-of-range fill and a misaligned reduce\n"
		"       rnic-gpu info [-g N]\n"
		"  -s, --size BYTES  buffer size (K/M suffixes, a multiple of 4; default 1M)\n"
		"  -g, --gpu N       /dev/rnic_gpuN (default 0)\n");
}

/* A GPU buffer and its BAR1 offset (the mapping is contiguous in BAR1: checked). */
static void *gpu_buf(const struct rv_gpu *g, size_t len, uint64_t *off)
{
	uint8_t *p = rv_gpu_alloc(g, len);
	uint64_t last;

	if (!p || rv_gpu_offset(g, p, off))
		return NULL;
	len = (len + 4095) & ~(size_t)4095;
	if (rv_gpu_offset(g, p + len - 4096, &last))
		return NULL;
	if (last != *off + len - 4096) {
		fprintf(stderr, "error: p2pmem mapping not contiguous in BAR1 (0x%llx .. 0x%llx)\n",
			(unsigned long long)*off, (unsigned long long)last);
		return NULL;
	}
	return p;
}

static int run_op(const struct rv_gpu *g, const char *name, uint64_t size)
{
	uint64_t n = size / 4, i, bad = n, t0, us;
	uint64_t oa, ob, oc;
	uint32_t op, result;
	uint32_t *a, *b = NULL, *c = NULL;
	float *fa, *fb, *fc;
	int err;

	a = gpu_buf(g, size, &oa);
	if (!a)
		return 1;
	if (strcmp(name, "fill")) {
		b = gpu_buf(g, size, &ob);
		if (!b)
			return 1;
	}
	if (!strcmp(name, "reduce")) {
		c = gpu_buf(g, size, &oc);
		if (!c)
			return 1;
	}

	printf("op: %s\n", name);
	printf("gpu: %s\n", g->pci);
	printf("bytes: %llu\n", (unsigned long long)size);
	t0 = rv_now_ns();
	if (!strcmp(name, "fill")) {
		op = GPU_ENG_OP_FILL32;
		memset(a, 0, size);
		t0 = rv_now_ns();
		err = launch(g, op, 0, 0, oa, size, FILL_VALUE, &result);
		us = (rv_now_ns() - t0) / 1000;
		for (i = 0; !err && i < n && bad == n; i++)
			if (a[i] != FILL_VALUE)
				bad = i;
	} else if (!strcmp(name, "copy")) {
		op = GPU_ENG_OP_COPY;
		rv_pattern_fill((uint8_t *)a, size, 3);
		memset(b, 0, size);
		t0 = rv_now_ns();
		err = launch(g, op, oa, 0, ob, size, 0, &result);
		us = (rv_now_ns() - t0) / 1000;
		if (!err && rv_pattern_check((uint8_t *)b, size, 3) != size)
			bad = rv_pattern_check((uint8_t *)b, size, 3) / 4;
	} else {
		op = GPU_ENG_OP_REDUCE_SUM_F32;
		fa = (float *)a;
		fb = (float *)b;
		fc = (float *)c;
		for (i = 0; i < n; i++) {
			fa[i] = (float)(i % 1000);
			fb[i] = 2.0f * (float)(i % 1000) + 0.5f;
			fc[i] = -1.0f;
		}
		t0 = rv_now_ns();
		err = launch(g, op, oa, ob, oc, size, 0, &result);
		us = (rv_now_ns() - t0) / 1000;
		for (i = 0; !err && i < n && bad == n; i++)
			if (fc[i] != 3.0f * (float)(i % 1000) + 0.5f)
				bad = i;
	}
	printf("elapsed_us: %llu\n", (unsigned long long)us);
	if (err) {
		printf("error: %s\n", errno_name(err));
		printf("status: %s\n", eng_result_name(result));
		printf("verified: 0\n");
		return 1;
	}
	if (bad != n) {
		printf("mismatch: element %llu\n", (unsigned long long)bad);
		printf("verified: 0\n");
		printf("status: %s\n", eng_result_name(result));
		return 1;
	}
	printf("verified: 1\n");
	printf("status: %s\n", eng_result_name(result));
	return 0;
}

/* Engine errors come back as errnos; the engine still works afterwards. */
static int run_errors(const struct rv_gpu *g)
{
	uint64_t off, bar = g->q.bar1_size;
	uint32_t *buf = gpu_buf(g, 4096, &off), result;
	int err, i;

	if (!buf)
		return 1;
	err = launch(g, GPU_ENG_OP_FILL32, 0, 0, bar - 64, 4096, 1, &result);
	printf("range_errno: %s\n", errno_name(err));
	printf("range_result: %s\n", eng_result_name(result));
	err = launch(g, GPU_ENG_OP_REDUCE_SUM_F32, off + 2, off + 1024, off + 2048, 64, 0, &result);
	printf("align_errno: %s\n", errno_name(err));
	printf("align_result: %s\n", eng_result_name(result));
	err = launch(g, 0x77, 0, 0, off, 64, 0, &result);
	printf("bad_op_errno: %s\n", errno_name(err));
	printf("bad_op_result: %s\n", eng_result_name(result));

	memset(buf, 0, 4096);
	err = launch(g, GPU_ENG_OP_FILL32, 0, 0, off, 4096, 0x5a5a5a5a, &result);
	for (i = 0; !err && i < 1024; i++)
		if (buf[i] != 0x5a5a5a5a)
			break;
	printf("after_errno: %s\n", errno_name(err));
	printf("after_status: %s\n", eng_result_name(result));
	printf("after_verified: %d\n", !err && i == 1024);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "size", required_argument, NULL, 's' },
		{ "gpu", required_argument, NULL, 'g' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t size = 1 << 20, v;
	unsigned int gpu_n = 0;
	struct rv_gpu g;
	const char *cmd;
	int c;

	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	cmd = argv[1];
	optind = 2;
	while ((c = getopt_long(argc, argv, "s:g:h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (parse_size(optarg, &size) || !size || size % 4 || size > (1ull << 30)) {
				fprintf(stderr, "rnic-gpu: bad size '%s' (4..1G, a multiple of 4)\n", optarg);
				return 2;
			}
			break;
		case 'g':
			if (parse_size(optarg, &v) || v > 255) {
				fprintf(stderr, "rnic-gpu: bad GPU number '%s'\n", optarg);
				return 2;
			}
			gpu_n = (unsigned int)v;
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	if (strcmp(cmd, "fill") && strcmp(cmd, "copy") && strcmp(cmd, "reduce") &&
	    strcmp(cmd, "errors") && strcmp(cmd, "info")) {
		fprintf(stderr, "rnic-gpu: unknown command '%s'\n", cmd);
		usage(stderr);
		return 2;
	}
	if (rv_gpu_open(gpu_n, &g))
		return 1;
	if (!strcmp(cmd, "info")) {
		printf("gpu: %s\n", g.pci);
		printf("index: %u\n", g.q.gpu_index);
		printf("hw_version: %u.%u\n", g.q.hw_version >> 16, g.q.hw_version & 0xffff);
		printf("bar1_size: %llu\n", (unsigned long long)g.q.bar1_size);
		printf("bar1_bus_addr: 0x%llx\n", (unsigned long long)g.q.bar1_bus_addr);
		printf("p2p: %u\n", g.q.p2p);
		return 0;
	}
	if (!strcmp(cmd, "errors"))
		return run_errors(&g);
	return run_op(&g, cmd, size);
}
