/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The host rendezvous store (docs/fabric.md, "Bootstrap"), from user space: one request
 * line on the guest's third serial port (/dev/ttyS2, raw), one reply line back.
 *
 *   PUT <key> <value>        -> OK
 *   GET <key> <timeout_ms>   -> VAL <value> | TIMEOUT
 *   anything else            -> ERR <reason>
 *
 * Keys (1..64 bytes) and values (1..1024 bytes) are printable ASCII without spaces. A
 * request holds an exclusive flock() on the tty for its whole round trip (a GET polls with
 * immediate requests, so a waiting GET does not block the others), so processes of
 * one guest do not interleave their lines. Header-only, shared by rnic-kv and rnic-perf.
 * Every helper prints what failed (to stderr, prefixed "error: ").
 *
 * The device can be overridden with the environment variable RNIC_KV_TTY (tests).
 *
 * Across hosts there is no host store: RNIC_KV_ADDR=IPV4:PORT sends every request over a
 * TCP connection of its own to that address instead (the same lines), where one guest
 * runs `rnic-kv serve PORT` (rnic-kv.c), as clusters bootstrap over their own network.
 * A refused connection is retried for up to RKV_CONNECT_MS (the store may start later).
 */
#ifndef RNIC_TOOL_KV_H
#define RNIC_TOOL_KV_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define RKV_DEFAULT_TTY		"/dev/ttyS2"
#define RKV_MAX_KEY		64
#define RKV_MAX_VALUE		1024
#define RKV_MAX_TIMEOUT_MS	600000u		/* the host store waits at most 10 minutes */
#define RKV_REPLY_SLACK_MS	10000u		/* beyond a GET's own timeout */
#define RKV_REPLY_MS		10000u		/* PUT */
#define RKV_CONNECT_MS		120000u		/* RNIC_KV_ADDR: until the store listens */
/* "VAL " + value + "\r\n", and room to notice a line that is too long */
#define RKV_LINE_MAX		(RKV_MAX_VALUE + 64)

/* Results of rkv_get() besides 0 (found) and -1 (error). */
#define RKV_TIMEOUT		1

static inline bool rkv_token_ok(const char *s, size_t max)
{
	size_t n = 0;

	for (; s[n]; n++)
		if ((unsigned char)s[n] <= 0x20 || (unsigned char)s[n] >= 0x7f || n >= max)
			return false;
	return n > 0;
}

/* A key the store accepts: 1..64 printable ASCII bytes, no space. */
static inline bool rkv_key_ok(const char *key)
{
	return rkv_token_ok(key, RKV_MAX_KEY);
}

/* A value the store accepts: 1..1024 printable ASCII bytes, no space. */
static inline bool rkv_value_ok(const char *value)
{
	return rkv_token_ok(value, RKV_MAX_VALUE);
}

static inline const char *rkv_tty_path(void)
{
	const char *p = getenv("RNIC_KV_TTY");

	return p && *p ? p : RKV_DEFAULT_TTY;
}

static inline uint64_t rkv_now_ms(void);

/* Where the store is, for messages. */
static inline const char *rkv_where(void)
{
	const char *tcp = getenv("RNIC_KV_ADDR");

	return tcp && *tcp ? tcp : rkv_tty_path();
}

/*
 * RNIC_KV_ADDR=a.b.c.d:port: a TCP connection to the guest-run store there, or -1
 * (printed); a refused or unreachable connection is retried until RKV_CONNECT_MS.
 */
static inline int rkv_open_tcp(const char *addr)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	char host[32];
	const char *colon = strrchr(addr, ':');
	unsigned long port;
	uint64_t deadline;
	char *end;

	if (!colon || (size_t)(colon - addr) >= sizeof(host)) {
		fprintf(stderr, "error: RNIC_KV_ADDR '%.80s' is not IPV4:PORT\n", addr);
		return -1;
	}
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = '\0';
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno || *end || !port || port > 65535 || inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
		fprintf(stderr, "error: RNIC_KV_ADDR '%.80s' is not IPV4:PORT\n", addr);
		return -1;
	}
	sa.sin_port = htons((uint16_t)port);
	deadline = rkv_now_ms() + RKV_CONNECT_MS;
	for (;;) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd < 0) {
			fprintf(stderr, "error: socket: %s\n", strerror(errno));
			return -1;
		}
		if (!connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
			return fd;
		close(fd);
		if ((errno != ECONNREFUSED && errno != EHOSTUNREACH && errno != ENETUNREACH &&
		     errno != ETIMEDOUT && errno != EINTR) || rkv_now_ms() >= deadline) {
			fprintf(stderr, "error: connect to the rendezvous store at %s: %s\n", addr,
				strerror(errno));
			return -1;
		}
		usleep(200000);
	}
}

/*
 * Opens the store: over TCP with RNIC_KV_ADDR, else its tty, raw (no echo, no line
 * discipline, VMIN 1) and locked; fd or -1.
 */
static inline int rkv_open(void)
{
	const char *path = rkv_tty_path();
	const char *tcp = getenv("RNIC_KV_ADDR");
	struct termios t;
	int fd;

	if (tcp && *tcp)
		return rkv_open_tcp(tcp);
	fd = open(path, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "error: open %s (the rendezvous store's serial port): %s\n", path,
			strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX)) {
		fprintf(stderr, "error: flock %s: %s\n", path, strerror(errno));
		close(fd);
		return -1;
	}
	/* Not a tty (a socket or FIFO in a test) is fine: nothing to configure. */
	if (tcgetattr(fd, &t) == 0) {
		cfmakeraw(&t);
		t.c_lflag &= ~(ECHO | ECHONL | ICANON | ISIG | IEXTEN);
		t.c_cflag |= CLOCAL | CREAD;
		t.c_cc[VMIN] = 1;
		t.c_cc[VTIME] = 0;
		/* QEMU paces its UART by the divisor: the fastest a 16550 goes. */
		cfsetispeed(&t, B115200);
		cfsetospeed(&t, B115200);
		if (tcsetattr(fd, TCSANOW, &t)) {
			fprintf(stderr, "error: tcsetattr %s: %s\n", path, strerror(errno));
			close(fd);
			return -1;
		}
		/* A reply left over from an earlier, abandoned request must not be taken for ours. */
		tcflush(fd, TCIFLUSH);
	}
	return fd;
}

static inline void rkv_close(int fd)
{
	if (fd >= 0)
		close(fd);	/* drops the flock */
}

static inline uint64_t rkv_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline int rkv_write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "error: write to %s: %s\n", rkv_where(),
				n < 0 ? strerror(errno) : "nothing written");
			return -1;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * Reads one reply line (it may arrive in pieces) into line[len], without the "\n" (and a
 * "\r" before it). Waits at most timeout_ms in all. 0, or -1 (printed).
 */
static inline int rkv_read_line(int fd, char *line, size_t len, unsigned int timeout_ms)
{
	uint64_t deadline = rkv_now_ms() + timeout_ms;
	size_t n = 0;

	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		uint64_t now = rkv_now_ms();
		ssize_t r;
		char c;
		int pr;

		if (now >= deadline) {
			fprintf(stderr, "error: no reply from the rendezvous store on %s within %u ms\n",
				rkv_where(), timeout_ms);
			return -1;
		}
		pr = poll(&pfd, 1, (int)(deadline - now));
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0) {
			fprintf(stderr, "error: poll %s: %s\n", rkv_where(), strerror(errno));
			return -1;
		}
		if (pr == 0)
			continue;
		r = read(fd, &c, 1);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r <= 0) {
			fprintf(stderr, "error: read %s: %s\n", rkv_where(),
				r < 0 ? strerror(errno) : "end of file");
			return -1;
		}
		if (c == '\n') {
			if (n && line[n - 1] == '\r')
				n--;
			line[n] = '\0';
			return 0;
		}
		if (n + 1 >= len) {
			fprintf(stderr, "error: reply from the rendezvous store longer than %zu bytes\n",
				len - 1);
			return -1;
		}
		line[n++] = c;
	}
}

/* One request (without its newline) and its reply line; 0 or -1 (printed). */
static inline int rkv_request(const char *req, char *reply, size_t reply_len,
			      unsigned int timeout_ms)
{
	size_t len = strlen(req);
	char *msg = malloc(len + 2);
	int fd, ret = -1;

	if (!msg) {
		fprintf(stderr, "error: out of memory\n");
		return -1;
	}
	memcpy(msg, req, len);
	msg[len] = '\n';
	fd = rkv_open();
	if (fd >= 0 && !rkv_write_all(fd, msg, len + 1))
		ret = rkv_read_line(fd, reply, reply_len, timeout_ms);
	rkv_close(fd);
	free(msg);
	return ret;
}

static inline void rkv_store_error(const char *what, const char *key, const char *reply)
{
	if (!strncmp(reply, "ERR", 3))
		fprintf(stderr, "error: rendezvous store refused %s %s: %s\n", what, key,
			reply[3] ? reply + 4 : "(no reason)");
	else
		fprintf(stderr, "error: rendezvous store: unexpected reply to %s %s: '%.80s'\n",
			what, key, reply);
}

/* PUT key value; 0, or -1 (printed: invalid key/value, no reply, ERR). */
static inline int rkv_put(const char *key, const char *value)
{
	char req[5 + RKV_MAX_KEY + 1 + RKV_MAX_VALUE + 1], reply[RKV_LINE_MAX];

	if (!rkv_key_ok(key)) {
		fprintf(stderr, "error: bad key '%.80s': 1..%u printable bytes, no space\n", key,
			RKV_MAX_KEY);
		return -1;
	}
	if (!rkv_value_ok(value)) {
		fprintf(stderr, "error: bad value for %s: 1..%u printable bytes, no space\n", key,
			RKV_MAX_VALUE);
		return -1;
	}
	snprintf(req, sizeof(req), "PUT %s %s", key, value);
	if (rkv_request(req, reply, sizeof(reply), RKV_REPLY_MS))
		return -1;
	if (strcmp(reply, "OK")) {
		rkv_store_error("PUT", key, reply);
		return -1;
	}
	return 0;
}

/*
 * GET key, waiting up to timeout_ms (0..RKV_MAX_TIMEOUT_MS) for it to exist: 0 with the
 * value in value[len] (len > RKV_MAX_VALUE), RKV_TIMEOUT, or -1 (printed).
 */
static inline int rkv_get(const char *key, unsigned int timeout_ms, char *value, size_t len)
{
	char req[5 + RKV_MAX_KEY + 16], reply[RKV_LINE_MAX];

	if (!rkv_key_ok(key)) {
		fprintf(stderr, "error: bad key '%.80s': 1..%u printable bytes, no space\n", key,
			RKV_MAX_KEY);
		return -1;
	}
	if (timeout_ms > RKV_MAX_TIMEOUT_MS) {
		fprintf(stderr, "error: GET timeout %u ms is over %u\n", timeout_ms,
			RKV_MAX_TIMEOUT_MS);
		return -1;
	}
	/*
	 * Poll with immediate GETs rather than one long blocking GET: the tty lock is held
	 * only for each short round trip, so other processes of this guest (a node that is
	 * server and client at once, as in a ring) can PUT and GET while this one waits.
	 */
	snprintf(req, sizeof(req), "GET %s 0", key);
	{
		struct timespec t0, now;
		unsigned long waited_ms;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (;;) {
			if (rkv_request(req, reply, sizeof(reply), RKV_REPLY_SLACK_MS))
				return -1;
			if (strcmp(reply, "TIMEOUT"))
				break;
			clock_gettime(CLOCK_MONOTONIC, &now);
			waited_ms = (now.tv_sec - t0.tv_sec) * 1000 +
				    (now.tv_nsec - t0.tv_nsec) / 1000000;
			if (waited_ms >= timeout_ms)
				return RKV_TIMEOUT;
			usleep(20000);
		}
	}
	if (strncmp(reply, "VAL ", 4) || !rkv_value_ok(reply + 4)) {
		rkv_store_error("GET", key, reply);
		return -1;
	}
	if (strlen(reply + 4) >= len) {
		fprintf(stderr, "error: value of %s longer than %zu bytes\n", key, len - 1);
		return -1;
	}
	strcpy(value, reply + 4);
	return 0;
}

/* This guest's node index, from rnic_emu.node=N on the kernel command line; -1 if absent. */
static inline int rkv_rank(void)
{
	char buf[4096], *p, *tok, *save = NULL;
	FILE *f = fopen("/proc/cmdline", "r");
	int rank = -1;
	size_t n;

	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	for (p = buf; (tok = strtok_r(p, " \t\n", &save)); p = NULL) {
		char *end;
		long v;

		if (strncmp(tok, "rnic_emu.node=", 14))
			continue;
		errno = 0;
		v = strtol(tok + 14, &end, 10);
		if (!errno && end != tok + 14 && !*end && v >= 0 && v <= 0xffff)
			rank = (int)v;	/* the last one wins, as for module parameters */
	}
	return rank;
}

#endif /* RNIC_TOOL_KV_H */
