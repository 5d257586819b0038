/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The RNIC's model summary: modelled hardware time for guest tools' "model" columns
 * (rnic-perf, rnic-coll). The device publishes a table in a Vendor-Specific Extended
 * Capability of its PCI configuration space (VSEC ID 1, layout in docs/timing.md,
 * "Modelled columns in the guest tools"): for each op (WRITE, READ, SEND), source and
 * destination memory (host, GPU) and size 2^0..2^(n-1) bytes, the modelled latency
 * (doorbell to the CPU seeing the CQE) and the per-message time of a back-to-back
 * stream. The tools read it from sysfs `config` (root: the extended space), so no
 * driver change is needed. Between the powers of two the value is interpolated
 * linearly (the model is piecewise linear in the packet count), beyond the last one
 * extended by the last segment's slope. Header-only, like rnic_tool_verbs.h.
 */
#ifndef RNIC_TOOL_MODEL_H
#define RNIC_TOOL_MODEL_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define RM_EXT_CAP_VSEC		0x000b
#define RM_VSEC_ID		0x0001
#define RM_MAX_SIZES		32
#define RM_ROWS			12
#define RM_CONFIG_SIZE		4096

enum rm_op { RM_WRITE, RM_READ, RM_SEND };

struct rm_model {
	bool ok;
	unsigned int sizes, shift;
	uint32_t t[RM_ROWS][RM_MAX_SIZES][2];	/* [row][2^k][latency, interval] */
};

static inline uint32_t rm_le32(const uint8_t *b)
{
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* Loads the table from `sysfs_dev`/config (a PCI device's sysfs directory); 0 or -1. */
static inline int rm_load(const char *sysfs_dev, struct rm_model *m)
{
	static uint8_t cfg[RM_CONFIG_SIZE];
	char path[256];
	size_t at = 0x100, n;
	unsigned int guard = 64, r, k;
	ssize_t got;
	int fd;

	memset(m, 0, sizeof(*m));
	snprintf(path, sizeof(path), "%s/config", sysfs_dev);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	got = pread(fd, cfg, sizeof(cfg), 0);
	close(fd);
	if (got < 0x110)
		return -1;
	n = (size_t)got;
	while (at >= 0x100 && at + 12 <= n && guard--) {
		uint32_t hdr = rm_le32(cfg + at), vsec = rm_le32(cfg + at + 4);

		if ((hdr & 0xffff) == RM_EXT_CAP_VSEC && (vsec & 0xffff) == RM_VSEC_ID) {
			size_t len = vsec >> 20, sizes = cfg[at + 8];

			if (!sizes || sizes > RM_MAX_SIZES || cfg[at + 9] != RM_ROWS ||
			    cfg[at + 10] > 16 || 12 + RM_ROWS * sizes * 8 > len || at + len > n)
				return -1;
			for (r = 0; r < RM_ROWS; r++)
				for (k = 0; k < sizes; k++) {
					const uint8_t *e = cfg + at + 12 + (r * sizes + k) * 8;

					m->t[r][k][0] = rm_le32(e);
					m->t[r][k][1] = rm_le32(e + 4);
				}
			m->sizes = (unsigned int)sizes;
			m->shift = cfg[at + 10];
			m->ok = true;
			return 0;
		}
		at = hdr >> 20;
	}
	return -1;
}

/* Value `v` (0: latency, 1: interval) of row `row` at `size` bytes, ns. */
static inline double rm_at(const struct rm_model *m, unsigned int row, int v, uint64_t size)
{
	double unit = 1.0 / (double)(1u << m->shift), a, b;
	unsigned int k = 0;
	uint64_t lo;

	if (m->sizes < 2 || size <= 1)
		return m->t[row][0][v] * unit;
	while (k + 2 < m->sizes && (2ull << k) < size)
		k++;
	lo = 1ull << k;
	a = m->t[row][k][v] * unit;
	b = m->t[row][k + 1][v] * unit;
	return a + (b - a) * (double)(size - lo) / (double)lo;
}

static inline unsigned int rm_row(enum rm_op op, bool src_gpu, bool dst_gpu)
{
	return (unsigned int)op * 4 + (src_gpu ? 2 : 0) + (dst_gpu ? 1 : 0);
}

/* Modelled latency of one message (doorbell to the CPU seeing its CQE), ns. */
static inline double rm_latency_ns(const struct rm_model *m, enum rm_op op, bool src_gpu,
				   bool dst_gpu, uint64_t size)
{
	return rm_at(m, rm_row(op, src_gpu, dst_gpu), 0, size);
}

/* Modelled per-message time of a back-to-back stream, ns. */
static inline double rm_interval_ns(const struct rm_model *m, enum rm_op op, bool src_gpu,
				    bool dst_gpu, uint64_t size)
{
	return rm_at(m, rm_row(op, src_gpu, dst_gpu), 1, size);
}

/* Modelled bandwidth (Gb/s) of a stream with `window` messages outstanding: each
 * message takes the stream interval, or its latency shared by the window if longer. */
static inline double rm_stream_gbps(const struct rm_model *m, enum rm_op op, bool src_gpu,
				    bool dst_gpu, uint64_t size, unsigned int window)
{
	double iv = rm_interval_ns(m, op, src_gpu, dst_gpu, size);
	double lat = rm_latency_ns(m, op, src_gpu, dst_gpu, size) / (window ? window : 1);

	return (double)size * 8 / (iv > lat ? iv : lat);
}

#endif
