// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-udata-check: rnic0 refuses driver input it does not define (docs/ibverbs.md). The
 * driver defines no input for any verb (include/uapi/rnic_ib_abi.h has responses only), so
 * a verb whose driver part is not empty or all zero must fail with EINVAL, as upstream
 * drivers check with ib_is_udata_cleared(). libibverbs never sends such input through our
 * provider, so this tool writes the uverbs commands itself (the write() ABI of
 * rdma/ib_user_verbs.h): a command header, the core request, then 8 bytes of driver input.
 *
 *   ucontext  GET_CONTEXT with driver input 0xff..: EINVAL; with 8 zero bytes: a context
 *   pd        ALLOC_PD likewise: EINVAL, then a PD
 *
 * Usage: rnic-udata-check. Prints "udata-<case>: ok" or "udata-<case>: FAIL <why>"; exit
 * status 0 when both passed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <rdma/ib_user_verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define DEV_NAME	"rnic0"

/* A write()-ABI command with one u64 core field (its response pointer) and driver input. */
struct cmd {
	struct ib_uverbs_cmd_hdr hdr;
	uint64_t response;
	uint64_t driver;
};

static int issue(int fd, uint32_t command, uint64_t driver, void *resp, size_t resp_len)
{
	struct cmd c = {
		.hdr = { .command = command, .in_words = sizeof(c) / 4,
			 .out_words = (uint16_t)(resp_len / 4) },
		.response = (uintptr_t)resp,
		.driver = driver,
	};

	return write(fd, &c, sizeof(c)) == (ssize_t)sizeof(c) ? 0 : -errno;
}

/* /dev/infiniband/uverbsN of DEV_NAME, opened; -1 if none. */
static int open_uverbs(void)
{
	DIR *d = opendir("/sys/class/infiniband_verbs");
	struct dirent *e;
	int fd = -1;

	while (d && fd < 0 && (e = readdir(d))) {
		char path[300], name[64] = "";
		FILE *f;

		snprintf(path, sizeof(path), "/sys/class/infiniband_verbs/%s/ibdev", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(name, sizeof(name), f) && !strncmp(name, DEV_NAME "\n", sizeof(DEV_NAME))) {
			snprintf(path, sizeof(path), "/dev/infiniband/%s", e->d_name);
			fd = open(path, O_RDWR | O_CLOEXEC);
		}
		fclose(f);
	}
	if (d)
		closedir(d);
	return fd;
}

static int verdict(const char *what, int bad, int good)
{
	if (bad != -EINVAL) {
		printf("udata-%s: FAIL non-zero driver input gave %s, not EINVAL\n", what,
		       bad ? strerror(-bad) : "success");
		return 1;
	}
	if (good) {
		printf("udata-%s: FAIL zero driver input refused (%s)\n", what, strerror(-good));
		return 1;
	}
	printf("udata-%s: ok\n", what);
	return 0;
}

int main(void)
{
	uint64_t resp[8];
	int fd = open_uverbs(), bad, good, rc;

	if (fd < 0) {
		printf("udata-setup: FAIL no uverbs device for " DEV_NAME " (%s)\n", strerror(errno));
		return 1;
	}
	bad = issue(fd, IB_USER_VERBS_CMD_GET_CONTEXT, ~0ULL, resp, sizeof(resp));
	good = issue(fd, IB_USER_VERBS_CMD_GET_CONTEXT, 0, resp, sizeof(resp));
	rc = verdict("ucontext", bad, good);
	if (good) {
		close(fd);
		return 1;
	}
	bad = issue(fd, IB_USER_VERBS_CMD_ALLOC_PD, 0x1234, resp, sizeof(struct ib_uverbs_alloc_pd_resp));
	good = issue(fd, IB_USER_VERBS_CMD_ALLOC_PD, 0, resp, sizeof(struct ib_uverbs_alloc_pd_resp));
	rc |= verdict("pd", bad, good);
	close(fd);	/* the context and its PD go with the file */
	return rc;
}
