// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-bar: find rnic-emu PCI functions and read/write their BARs from the guest.
 *
 *   rnic-bar find rnic|gpu
 *   rnic-bar pattern-write <dev> <bar> <offset> <len> <seed>
 *   rnic-bar pattern-check <dev> <bar> <offset> <len> <seed>
 *   rnic-bar dump <dev> <bar> <offset> <len>
 *
 * BARs are reached by mmap of /sys/bus/pci/devices/<dev>/resource<bar>, so no driver
 * is needed and the GPU's BAR1 must not be claimed by one (CONFIG_IO_STRICT_DEVMEM).
 *
 * The test pattern is a contract with the host side: the byte at absolute BAR offset i is
 *   x = (uint32_t)i * 0x9E3779B1u + seed * 0x85EBCA77u;  byte = (uint8_t)(x >> 24)
 * in wrapping uint32_t arithmetic.
 *
 * Exit status: 0 success; 1 failure (no device found, pattern mismatch, open/mmap error);
 * 2 bad usage or arguments.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "uapi/rnic_emu_regs.h"

#define PCI_DEVICES_DIR		"/sys/bus/pci/devices"
#define PCI_MAX_BAR		5

#define PATTERN_MUL_OFFSET	0x9E3779B1u
#define PATTERN_MUL_SEED	0x85EBCA77u

#define EXIT_FAIL		1
#define EXIT_USAGE		2

static const char *prog = "rnic-bar";

static void usage(FILE *out)
{
	fprintf(out,
		"usage:\n"
		"  %1$s find rnic|gpu\n"
		"      print the PCI addresses of matching functions, one per line (exit 1 if none)\n"
		"  %1$s pattern-write <dev> <bar> <offset> <len> <seed>\n"
		"      fill BAR bytes [offset, offset+len) with the test pattern of <seed>\n"
		"  %1$s pattern-check <dev> <bar> <offset> <len> <seed>\n"
		"      compare those bytes with the pattern: \"ok <len> bytes\" or the first mismatch\n"
		"  %1$s dump <dev> <bar> <offset> <len>\n"
		"      hex dump, 16 bytes a line\n"
		"  %1$s help\n"
		"\n"
		"<dev>     a PCI address (0000:03:00.0 or 03:00.0), or rnic / gpu for the first one found\n"
		"<bar>     BAR index 0..5; accessed through %2$s/<dev>/resource<bar>\n"
		"<offset>, <len>  decimal or 0x hex, optional K/M/G suffix (x1024)\n"
		"<seed>    32-bit, decimal or 0x hex\n"
		"pattern:  byte at BAR offset i = (uint8_t)((i * 0x9E3779B1 + seed * 0x85EBCA77) >> 24),\n"
		"          uint32_t arithmetic\n"
		"IDs:      RNIC_EMU_VENDOR_ID, RNIC_EMU_RNIC_DEVICE_ID, RNIC_EMU_GPU_DEVICE_ID (hex)\n"
		"          override the defaults %3$04x:%4$04x (rnic) and %3$04x:%5$04x (gpu)\n"
		"exit:     0 ok, 1 failure or mismatch, 2 bad arguments\n",
		prog, PCI_DEVICES_DIR, RNIC_EMU_VENDOR_ID, RNIC_EMU_RNIC_DEVICE_ID,
		RNIC_EMU_GPU_DEVICE_ID);
}

static void __attribute__((format(printf, 2, 3), noreturn))
die(int status, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(status);
}

/*
 * Parses "123", "0x7b" and, if @suffixes, a trailing K, M or G (binary multiples).
 * Returns 0 or -1 (not a number, or it does not fit in 64 bits).
 */
static int parse_u64(const char *s, int suffixes, uint64_t *out)
{
	unsigned long long v;
	uint64_t mul = 1;
	int base = 10;
	char *end;

	if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
		return -1;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
		if (!*s)
			return -1;
	}
	if (!(base == 16 ? (*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f') ||
			   (*s >= 'A' && *s <= 'F')
			 : (*s >= '0' && *s <= '9')))
		return -1;
	errno = 0;
	v = strtoull(s, &end, base);
	if (errno)
		return -1;
	if (*end && suffixes) {
		switch (*end) {
		case 'k': case 'K':
			mul = 1ull << 10;
			break;
		case 'm': case 'M':
			mul = 1ull << 20;
			break;
		case 'g': case 'G':
			mul = 1ull << 30;
			break;
		default:
			return -1;
		}
		end++;
	}
	if (*end)
		return -1;
	if (v > UINT64_MAX / mul)
		return -1;
	*out = (uint64_t)v * mul;
	return 0;
}

static uint64_t arg_u64(const char *what, const char *s, int suffixes, uint64_t max)
{
	uint64_t v;

	if (parse_u64(s, suffixes, &v) || v > max)
		die(EXIT_USAGE, "bad %s '%s' (want 0..%#" PRIx64 ", decimal or 0x hex%s)",
		    what, s, max, suffixes ? ", K/M/G suffix" : "");
	return v;
}

/* A PCI ID from the environment (hex, with or without 0x), or the default. */
static unsigned int env_id(const char *name, unsigned int dflt)
{
	const char *s = getenv(name);
	unsigned long v;
	char *end;

	if (!s || !*s)
		return dflt;
	errno = 0;
	v = strtoul(s, &end, 16);
	if (errno || *end || v > 0xffff || *s == '-')
		die(EXIT_USAGE, "bad %s='%s' (want a 16-bit hex ID)", name, s);
	return (unsigned int)v;
}

/* Reads a sysfs file holding one hex number ("0x1234\n"). Returns 0 or -1. */
static int read_sysfs_hex(const char *dir, const char *file, unsigned int *out)
{
	char path[512], buf[32], *end;
	unsigned long v;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s/%s", PCI_DEVICES_DIR, dir, file);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	errno = 0;
	v = strtoul(buf, &end, 16);
	if (errno || end == buf || (*end && *end != '\n'))
		return -1;
	*out = (unsigned int)v;
	return 0;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * The PCI addresses of the functions of @kind ("rnic" or "gpu"), sorted.
 * Returns how many; *names is a malloc'd array of malloc'd strings.
 */
static size_t find_devices(const char *kind, char ***names)
{
	unsigned int vendor = env_id("RNIC_EMU_VENDOR_ID", RNIC_EMU_VENDOR_ID);
	unsigned int want, ven, dev;
	char **list = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;

	if (!strcmp(kind, "rnic"))
		want = env_id("RNIC_EMU_RNIC_DEVICE_ID", RNIC_EMU_RNIC_DEVICE_ID);
	else if (!strcmp(kind, "gpu"))
		want = env_id("RNIC_EMU_GPU_DEVICE_ID", RNIC_EMU_GPU_DEVICE_ID);
	else
		die(EXIT_USAGE, "unknown device kind '%s' (want rnic or gpu)", kind);

	d = opendir(PCI_DEVICES_DIR);
	if (!d)
		die(EXIT_FAIL, "cannot list %s: %s", PCI_DEVICES_DIR, strerror(errno));
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (read_sysfs_hex(de->d_name, "vendor", &ven) ||
		    read_sysfs_hex(de->d_name, "device", &dev))
			continue;
		if (ven != vendor || dev != want)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 8;
			list = realloc(list, cap * sizeof(*list));
			if (!list)
				die(EXIT_FAIL, "out of memory");
		}
		list[n] = strdup(de->d_name);
		if (!list[n])
			die(EXIT_FAIL, "out of memory");
		n++;
	}
	closedir(d);
	if (n)
		qsort(list, n, sizeof(*list), cmp_names);
	*names = list;
	return n;
}

static int cmd_find(int argc, char **argv)
{
	char **names;
	size_t i, n;

	if (argc != 1) {
		usage(stderr);
		return EXIT_USAGE;
	}
	n = find_devices(argv[0], &names);
	for (i = 0; i < n; i++) {
		printf("%s\n", names[i]);
		free(names[i]);
	}
	free(names);
	if (!n) {
		fprintf(stderr, "%s: no %s device found under %s\n", prog, argv[0],
			PCI_DEVICES_DIR);
		return EXIT_FAIL;
	}
	return 0;
}

/* Resolves <dev>: "rnic"/"gpu" (first found), "0000:03:00.0", or "03:00.0". */
static void resolve_dev(const char *arg, char *out, size_t outlen)
{
	char path[512];
	struct stat st;
	char **names;
	size_t i, n;

	if (!strcmp(arg, "rnic") || !strcmp(arg, "gpu")) {
		n = find_devices(arg, &names);
		if (!n)
			die(EXIT_FAIL, "no %s device found under %s", arg, PCI_DEVICES_DIR);
		snprintf(out, outlen, "%s", names[0]);
		for (i = 0; i < n; i++)
			free(names[i]);
		free(names);
		return;
	}

	if (!*arg || strchr(arg, '/') || arg[0] == '.' || strlen(arg) > 64)
		die(EXIT_USAGE, "bad device '%s' (want a PCI address such as 0000:03:00.0, "
		    "or rnic or gpu)", arg);
	/* "bb:dd.f" without a domain means domain 0000. */
	if (strchr(arg, ':') == strrchr(arg, ':'))
		snprintf(out, outlen, "0000:%s", arg);
	else
		snprintf(out, outlen, "%s", arg);
	snprintf(path, sizeof(path), "%s/%s", PCI_DEVICES_DIR, out);
	if (stat(path, &st) || !S_ISDIR(st.st_mode))
		die(EXIT_USAGE, "no PCI device %s (%s)", out, path);
}

/* A window [offset, offset + len) of one BAR, mapped. */
struct bar_map {
	char dev[96];
	unsigned int bar;
	uint64_t bar_size;
	uint64_t offset;
	uint64_t len;
	void *map;		/* the page-aligned mapping */
	size_t map_len;
	volatile uint8_t *p;	/* BAR byte at @offset */
};

static void bar_open(struct bar_map *m, char **argv, int writable)
{
	char path[512];
	long page = sysconf(_SC_PAGESIZE);
	uint64_t map_off;
	struct stat st;
	int fd;

	if (page <= 0)
		page = 4096;
	m->bar = (unsigned int)arg_u64("BAR index", argv[1], 0, PCI_MAX_BAR);
	m->offset = arg_u64("offset", argv[2], 1, UINT64_MAX);
	m->len = arg_u64("length", argv[3], 1, UINT64_MAX);
	resolve_dev(argv[0], m->dev, sizeof(m->dev));

	snprintf(path, sizeof(path), "%s/%s/resource%u", PCI_DEVICES_DIR, m->dev, m->bar);
	fd = open(path, O_RDWR | O_SYNC | O_CLOEXEC);
	if (fd < 0)
		die(errno == ENOENT ? EXIT_USAGE : EXIT_FAIL, "cannot open %s: %s", path,
		    errno == ENOENT ? "no such BAR" : strerror(errno));
	if (fstat(fd, &st))
		die(EXIT_FAIL, "cannot stat %s: %s", path, strerror(errno));
	m->bar_size = (uint64_t)st.st_size;
	if (m->offset > m->bar_size || m->len > m->bar_size - m->offset)
		die(EXIT_USAGE, "range offset %#" PRIx64 " length %#" PRIx64
		    " exceeds BAR%u of %s (size %#" PRIx64 ")",
		    m->offset, m->len, m->bar, m->dev, m->bar_size);
	if (m->len > SIZE_MAX - (size_t)page)
		die(EXIT_USAGE, "length %#" PRIx64 " too large to map", m->len);

	m->map = NULL;
	m->map_len = 0;
	m->p = NULL;
	if (m->len) {
		map_off = m->offset & ~((uint64_t)page - 1);
		m->map_len = (size_t)(m->offset - map_off + m->len);
		m->map = mmap(NULL, m->map_len, PROT_READ | (writable ? PROT_WRITE : 0),
			      MAP_SHARED, fd, (off_t)map_off);
		if (m->map == MAP_FAILED)
			die(EXIT_FAIL, "cannot mmap %s (offset %#" PRIx64 ", %zu bytes): %s%s",
			    path, map_off, m->map_len, strerror(errno),
			    errno == EINVAL ? " (a BAR claimed by a driver, such as BAR0 of a bound "
			    "rnic-emu function, cannot be mapped under CONFIG_IO_STRICT_DEVMEM; "
			    "unbind the driver or rmmod rnic_emu first)" : "");
		m->p = (volatile uint8_t *)m->map + (m->offset - map_off);
	}
	close(fd);
}

static void bar_close(struct bar_map *m)
{
	if (m->map)
		munmap(m->map, m->map_len);
	m->map = NULL;
}

static inline uint8_t pattern_byte(uint32_t i, uint32_t seed)
{
	uint32_t x = i * PATTERN_MUL_OFFSET + seed * PATTERN_MUL_SEED;

	return (uint8_t)(x >> 24);
}

/* The 8 pattern bytes starting at BAR offset @i, as they lie in memory. */
static inline uint64_t pattern_word(uint32_t i, uint32_t seed)
{
	uint32_t x = i * PATTERN_MUL_OFFSET + seed * PATTERN_MUL_SEED;
	uint8_t b[8];
	uint64_t w;
	int k;

	for (k = 0; k < 8; k++) {
		b[k] = (uint8_t)(x >> 24);
		x += PATTERN_MUL_OFFSET;
	}
	memcpy(&w, b, sizeof(w));
	return w;
}

/* Bytes before the first 8-byte aligned BAR offset, and the aligned middle's length. */
static void split_range(const struct bar_map *m, uint64_t *head, uint64_t *body)
{
	uint64_t h = (8 - (m->offset & 7)) & 7;

	if (h > m->len)
		h = m->len;
	*head = h;
	*body = (m->len - h) & ~(uint64_t)7;
}

static int cmd_pattern_write(int argc, char **argv)
{
	uint64_t head, body, k;
	struct bar_map m;
	uint32_t seed;

	if (argc != 5) {
		usage(stderr);
		return EXIT_USAGE;
	}
	seed = (uint32_t)arg_u64("seed", argv[4], 0, UINT32_MAX);
	bar_open(&m, argv, 1);
	split_range(&m, &head, &body);

	for (k = 0; k < head; k++)
		m.p[k] = pattern_byte((uint32_t)(m.offset + k), seed);
	for (; k < head + body; k += 8)
		*(volatile uint64_t *)(m.p + k) = pattern_word((uint32_t)(m.offset + k), seed);
	for (; k < m.len; k++)
		m.p[k] = pattern_byte((uint32_t)(m.offset + k), seed);
	__sync_synchronize();

	bar_close(&m);
	printf("wrote %" PRIu64 " bytes\n", m.len);
	return 0;
}

struct mismatch {
	uint64_t bad;		/* bad bytes so far */
	uint64_t first;		/* absolute BAR offset of the first */
	uint8_t got, want;
};

static void note_bytes(struct mismatch *mm, uint64_t off, const uint8_t *got,
		       const uint8_t *want, unsigned int n)
{
	unsigned int j;

	for (j = 0; j < n; j++) {
		if (got[j] == want[j])
			continue;
		if (!mm->bad) {
			mm->first = off + j;
			mm->got = got[j];
			mm->want = want[j];
		}
		mm->bad++;
	}
}

static void check_byte(struct mismatch *mm, const struct bar_map *m, uint64_t k, uint32_t seed)
{
	uint8_t got = m->p[k];
	uint8_t want = pattern_byte((uint32_t)(m->offset + k), seed);

	note_bytes(mm, m->offset + k, &got, &want, 1);
}

static int cmd_pattern_check(int argc, char **argv)
{
	struct mismatch mm = { 0 };
	uint64_t head, body, k, got, want;
	struct bar_map m;
	uint32_t seed;

	if (argc != 5) {
		usage(stderr);
		return EXIT_USAGE;
	}
	seed = (uint32_t)arg_u64("seed", argv[4], 0, UINT32_MAX);
	bar_open(&m, argv, 0);
	split_range(&m, &head, &body);

	for (k = 0; k < head; k++)
		check_byte(&mm, &m, k, seed);
	for (; k < head + body; k += 8) {
		got = *(volatile uint64_t *)(m.p + k);
		want = pattern_word((uint32_t)(m.offset + k), seed);
		if (got != want)
			note_bytes(&mm, m.offset + k, (const uint8_t *)&got,
				   (const uint8_t *)&want, 8);
	}
	for (; k < m.len; k++)
		check_byte(&mm, &m, k, seed);

	bar_close(&m);
	if (mm.bad) {
		printf("mismatch at offset 0x%" PRIx64 ": got 0x%02x want 0x%02x (%" PRIu64
		       " bad bytes)\n", mm.first, mm.got, mm.want, mm.bad);
		return EXIT_FAIL;
	}
	printf("ok %" PRIu64 " bytes\n", m.len);
	return 0;
}

/*
 * Hex dump. Aligned 4-byte reads where possible (BAR0 registers accept only aligned
 * 4- or 8-byte accesses), single bytes at unaligned edges.
 */
static int cmd_dump(int argc, char **argv)
{
	uint8_t line[16];
	uint64_t k, n, j;
	struct bar_map m;
	uint32_t w;

	if (argc != 4) {
		usage(stderr);
		return EXIT_USAGE;
	}
	bar_open(&m, argv, 0);

	for (k = 0; k < m.len; k += n) {
		n = m.len - k < 16 ? m.len - k : 16;
		for (j = 0; j < n;) {
			if (((m.offset + k + j) & 3) == 0 && n - j >= 4) {
				w = *(volatile uint32_t *)(m.p + k + j);
				memcpy(&line[j], &w, 4);
				j += 4;
			} else {
				line[j] = m.p[k + j];
				j++;
			}
		}
		printf("%08" PRIx64 ":", m.offset + k);
		for (j = 0; j < n; j++)
			printf(" %02x", line[j]);
		putchar('\n');
	}

	bar_close(&m);
	return 0;
}

int main(int argc, char **argv)
{
	const char *cmd;

	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	cmd = argv[1];
	if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(cmd, "find"))
		return cmd_find(argc - 2, argv + 2);
	if (!strcmp(cmd, "pattern-write"))
		return cmd_pattern_write(argc - 2, argv + 2);
	if (!strcmp(cmd, "pattern-check"))
		return cmd_pattern_check(argc - 2, argv + 2);
	if (!strcmp(cmd, "dump"))
		return cmd_dump(argc - 2, argv + 2);

	fprintf(stderr, "%s: unknown command '%s'\n", prog, cmd);
	usage(stderr);
	return EXIT_USAGE;
}
