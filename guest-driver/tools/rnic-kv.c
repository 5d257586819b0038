// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-kv: the guest's client of the host rendezvous store (docs/fabric.md, "Bootstrap"),
 * reachable on /dev/ttyS2 in a multi-node `rnic-emu run`. Static, libc only.
 *
 *   rnic-kv put KEY VALUE          store VALUE under KEY (prints nothing)
 *   rnic-kv get KEY [TIMEOUT_MS]   print KEY's value, waiting for it (default 30000 ms)
 *   rnic-kv rank                   print this node's index (rnic_emu.node=N)
 *   rnic-kv serve PORT             be the store, on TCP PORT of every address: for nodes
 *                                  on several hosts, whose clients set
 *                                  RNIC_KV_ADDR=<this guest's address>:PORT
 *
 * Exit status: 0 ok; 1 get timed out, or rank: no rnic_emu.node= on the kernel command
 * line; 2 bad usage (including a key or value the store would refuse); 3 the store failed
 * (no serial port, no reply, an ERR reply).
 */
#define _GNU_SOURCE	/* accept4 */
#include <stdlib.h>

#include "rnic_tool_kv.h"

#define KV_DEFAULT_GET_MS	30000u
#define KV_SERVE_KEYS		4096	/* entries the guest-run store holds at most */
#define KV_SERVE_CLIENTS	64	/* connections open at once */
#define KV_SERVE_IDLE_MS	10000u	/* a connection without a whole request by then is closed */

/* The guest-run store: one request line per connection, answered at once (a GET of a key
 * not there yet is TIMEOUT: clients poll, as with the host's store). */
struct kv_entry {
	char key[RKV_MAX_KEY + 1];
	char value[RKV_MAX_VALUE + 1];
};

struct kv_conn {
	int fd;
	size_t n;
	uint64_t since;
	char line[RKV_LINE_MAX];
};

static struct kv_entry *kv_find(struct kv_entry *t, size_t n, const char *key)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(t[i].key, key))
			return &t[i];
	return NULL;
}

/* The reply to one request line (without its newline). */
static const char *kv_answer(struct kv_entry *t, size_t *n, char *line, char *reply, size_t len)
{
	char *save = NULL, *op = strtok_r(line, " ", &save);
	char *key = op ? strtok_r(NULL, " ", &save) : NULL;
	char *arg = key ? strtok_r(NULL, " ", &save) : NULL;
	struct kv_entry *e;

	if (!op || !key || !arg || strtok_r(NULL, " ", &save) || !rkv_key_ok(key))
		return "ERR malformed request";
	if (!strcmp(op, "PUT")) {
		if (!rkv_value_ok(arg))
			return "ERR bad value";
		e = kv_find(t, *n, key);
		if (!e) {
			if (*n == KV_SERVE_KEYS)
				return "ERR store full";
			e = &t[(*n)++];
			strcpy(e->key, key);
		}
		strcpy(e->value, arg);
		return "OK";
	}
	if (!strcmp(op, "GET")) {
		e = kv_find(t, *n, key);
		if (!e)
			return "TIMEOUT";
		snprintf(reply, len, "VAL %s", e->value);
		return reply;
	}
	return "ERR unknown request";
}

static void kv_drop(struct kv_conn *c)
{
	close(c->fd);
	c->fd = -1;
}

static int serve(unsigned long port)
{
	static struct kv_entry table[KV_SERVE_KEYS];
	static struct kv_conn conns[KV_SERVE_CLIENTS];
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct pollfd pfd[KV_SERVE_CLIENTS + 1];
	char reply[RKV_LINE_MAX];
	size_t entries = 0;
	int one = 1, lfd;

	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, KV_SERVE_CLIENTS)) {
		fprintf(stderr, "rnic-kv: serve on port %lu: %s\n", port, strerror(errno));
		return 3;
	}
	for (int i = 0; i < KV_SERVE_CLIENTS; i++)
		conns[i].fd = -1;
	for (;;) {
		uint64_t now = rkv_now_ms();

		pfd[0] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (int i = 0; i < KV_SERVE_CLIENTS; i++) {
			if (conns[i].fd >= 0 && now - conns[i].since > KV_SERVE_IDLE_MS)
				kv_drop(&conns[i]);
			pfd[i + 1] = (struct pollfd){ .fd = conns[i].fd, .events = POLLIN };
		}
		if (poll(pfd, KV_SERVE_CLIENTS + 1, 1000) < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "rnic-kv: poll: %s\n", strerror(errno));
			return 3;
		}
		if (pfd[0].revents & POLLIN) {
			int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
			int i = 0;

			while (fd >= 0 && i < KV_SERVE_CLIENTS && conns[i].fd >= 0)
				i++;
			if (fd >= 0 && i == KV_SERVE_CLIENTS)
				close(fd);	/* too many at once: the client retries */
			else if (fd >= 0)
				conns[i] = (struct kv_conn){ .fd = fd, .n = 0, .since = now };
		}
		for (int i = 0; i < KV_SERVE_CLIENTS; i++) {
			struct kv_conn *c = &conns[i];
			char *nl;
			ssize_t r;

			if (c->fd < 0 || !(pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			r = read(c->fd, c->line + c->n, sizeof(c->line) - 1 - c->n);
			if (r <= 0) {
				kv_drop(c);
				continue;
			}
			c->n += (size_t)r;
			c->line[c->n] = '\0';
			nl = strchr(c->line, '\n');
			if (!nl && c->n < sizeof(c->line) - 1)
				continue;
			if (nl) {
				const char *a;

				*nl = '\0';
				if (nl > c->line && nl[-1] == '\r')
					nl[-1] = '\0';
				a = kv_answer(table, &entries, c->line, reply, sizeof(reply));
				if (a != reply)
					snprintf(reply, sizeof(reply), "%s", a);
			} else {
				snprintf(reply, sizeof(reply), "ERR request longer than %zu bytes",
					 sizeof(c->line) - 1);
			}
			strncat(reply, "\n", sizeof(reply) - strlen(reply) - 1);
			if (write(c->fd, reply, strlen(reply)) < 0)
				fprintf(stderr, "rnic-kv: reply: %s\n", strerror(errno));
			kv_drop(c);
		}
	}
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rnic-kv put KEY VALUE\n"
		"       rnic-kv get KEY [TIMEOUT_MS]   (default %u; at most %u)\n"
		"       rnic-kv rank\n"
		"       rnic-kv serve PORT             (clients: RNIC_KV_ADDR=ADDRESS:PORT)\n"
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
	if (!strcmp(argv[1], "serve")) {
		unsigned long port;

		errno = 0;
		port = argc == 3 ? strtoul(argv[2], &end, 10) : 0;
		if (argc != 3 || errno || *end || !port || port > 65535) {
			usage(stderr);
			return 2;
		}
		return serve(port);
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
