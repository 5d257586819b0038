// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-kv: the guest's client of the host rendezvous store (docs/fabric.md, "Bootstrap"),
 * reachable on /dev/ttyS2 in a multi-node `rnic-emu run`. Static, libc only.
 *
 *   rnic-kv put KEY VALUE          store VALUE under KEY (prints nothing)
 *   rnic-kv get KEY [TIMEOUT_MS]   print KEY's value, waiting for it (default 30000 ms)
 *   rnic-kv rank                   print this node's index (rnic_emu.node=N)
 *
 * Exit status: 0 ok; 1 get timed out, or rank: no rnic_emu.node= on the kernel command
 * line; 2 bad usage (including a key or value the store would refuse); 3 the store failed
 * (no serial port, no reply, an ERR reply).
 */
#include <stdlib.h>

#include "rnic_tool_kv.h"

#define KV_DEFAULT_GET_MS	30000u

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rnic-kv put KEY VALUE\n"
		"       rnic-kv get KEY [TIMEOUT_MS]   (default %u; at most %u)\n"
		"       rnic-kv rank\n"
		"KEY: 1..%u, VALUE: 1..%u printable ASCII bytes without spaces.\n"
		"The store is on %s (RNIC_KV_TTY overrides).\n"
		"Exit status: 0 ok; 1 get: TIMEOUT, rank: unknown; 2 bad usage; 3 store error.\n",
		KV_DEFAULT_GET_MS, RKV_MAX_TIMEOUT_MS, RKV_MAX_KEY, RKV_MAX_VALUE,
		RKV_DEFAULT_TTY);
}

static int check_key(const char *key)
{
	if (rkv_key_ok(key))
		return 0;
	fprintf(stderr, "rnic-kv: bad key '%.80s': 1..%u printable ASCII bytes, no space\n",
		key, RKV_MAX_KEY);
	return -1;
}

int main(int argc, char **argv)
{
	char value[RKV_MAX_VALUE + 1];
	unsigned long timeout = KV_DEFAULT_GET_MS;
	char *end;
	int ret;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "rank")) {
		if (argc != 2) {
			usage(stderr);
			return 2;
		}
		ret = rkv_rank();
		if (ret < 0) {
			fprintf(stderr, "rnic-kv: no rnic_emu.node=N on the kernel command line\n");
			return 1;
		}
		printf("%d\n", ret);
		return 0;
	}
	if (!strcmp(argv[1], "put")) {
		if (argc != 4) {
			usage(stderr);
			return 2;
		}
		if (check_key(argv[2]))
			return 2;
		if (!rkv_value_ok(argv[3])) {
			fprintf(stderr, "rnic-kv: bad value: 1..%u printable ASCII bytes, no space\n",
				RKV_MAX_VALUE);
			return 2;
		}
		return rkv_put(argv[2], argv[3]) ? 3 : 0;
	}
	if (!strcmp(argv[1], "get")) {
		if (argc != 3 && argc != 4) {
			usage(stderr);
			return 2;
		}
		if (check_key(argv[2]))
			return 2;
		if (argc == 4) {
			errno = 0;
			timeout = strtoul(argv[3], &end, 10);
			if (errno || end == argv[3] || *end || argv[3][0] == '-' ||
			    timeout > RKV_MAX_TIMEOUT_MS) {
				fprintf(stderr, "rnic-kv: bad timeout '%s' (0..%u ms)\n", argv[3],
					RKV_MAX_TIMEOUT_MS);
				return 2;
			}
		}
		ret = rkv_get(argv[2], (unsigned int)timeout, value, sizeof(value));
		if (ret == RKV_TIMEOUT) {
			fprintf(stderr, "rnic-kv: %s: TIMEOUT after %lu ms\n", argv[2], timeout);
			return 1;
		}
		if (ret)
			return 3;
		printf("%s\n", value);
		return 0;
	}
	fprintf(stderr, "rnic-kv: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
