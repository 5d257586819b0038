/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Small user-space helpers for the driver-robustness tools (rnic-driver-check,
 * rnic-ioctl-stress): sysfs writes that may block in the kernel (unbind, remove) done in
 * a child with a deadline, errno names, and a scan of the kernel log for lines that mean
 * the kernel found a bug (WARN, BUG, lockdep, hung task). Header-only, like
 * rnic_tool_verbs.h.
 */
#ifndef RNIC_TOOL_SYS_H
#define RNIC_TOOL_SYS_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline uint64_t rs_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline void rs_sleep_ms(unsigned int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static inline const char *rs_errno_name(int e)
{
	switch (e) {
	case 0:		return "OK";
	case EINVAL:	return "EINVAL";
	case ENOENT:	return "ENOENT";
	case ENOMEM:	return "ENOMEM";
	case EBUSY:	return "EBUSY";
	case EFAULT:	return "EFAULT";
	case EIO:	return "EIO";
	case ENODEV:	return "ENODEV";
	case EPERM:	return "EPERM";
	case EINTR:	return "EINTR";
	case ENOTTY:	return "ENOTTY";
	case ETIMEDOUT:	return "ETIMEDOUT";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EREMOTEIO:	return "EREMOTEIO";
	case EBADF:	return "EBADF";
	case EAGAIN:	return "EAGAIN";
	default:	return "OTHER";
	}
}

/* The PCI address (last component of the symlink target) of a sysfs device link. */
static inline int rs_link_bdf(const char *link, char *bdf, size_t len)
{
	char target[256];
	const char *base;
	ssize_t n = readlink(link, target, sizeof(target) - 1);

	if (n < 0) {
		fprintf(stderr, "error: readlink %s: %s\n", link, strerror(errno));
		return -1;
	}
	target[n] = 0;
	base = strrchr(target, '/');
	snprintf(bdf, len, "%.31s", base ? base + 1 : target);
	return 0;
}

/* Writes value to a sysfs file; 0 or errno. */
static inline int rs_write_file(const char *path, const char *value)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), e = 0;

	if (fd < 0)
		return errno;
	if (write(fd, value, strlen(value)) < 0)
		e = errno;
	close(fd);
	return e;
}

/* A sysfs write running in a child process (it may block in the kernel). */
struct rs_bg_write {
	pid_t pid;
	uint64_t start_ms;
	int status;			/* exit status once done: 0 or the write's errno */
	int done;
};

static inline int rs_bg_write_start(struct rs_bg_write *w, const char *path, const char *value)
{
	memset(w, 0, sizeof(*w));
	w->start_ms = rs_now_ms();
	w->pid = fork();
	if (w->pid < 0)
		return -1;
	if (w->pid == 0)
		_exit(rs_write_file(path, value) & 0x7f);
	return 0;
}

/*
 * Waits up to timeout_ms for the write; returns its duration in ms, or -1 if it is still
 * blocked (the child stays; wait again later).
 */
static inline long rs_bg_write_wait(struct rs_bg_write *w, unsigned int timeout_ms)
{
	uint64_t deadline = rs_now_ms() + timeout_ms;
	int st;

	while (!w->done) {
		pid_t r = waitpid(w->pid, &st, WNOHANG);

		if (r == w->pid) {
			w->done = 1;
			w->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
			return (long)(rs_now_ms() - w->start_ms);
		}
		if (rs_now_ms() >= deadline)
			return -1;
		rs_sleep_ms(20);
	}
	return (long)(rs_now_ms() - w->start_ms);
}

/* Kernel log lines that mean the kernel found a bug in what ran. */
static inline int rs_kmsg_is_bad(const char *line)
{
	static const char *const bad[] = {
		"WARNING:", "BUG:", "Oops", "kernel BUG", "possible circular locking",
		"possible recursive locking", "inconsistent lock state", "lockdep",
		"blocked for more than", "hung_task", "general protection fault",
		"Call Trace:", "nobody cared", "wrong timeout value", "list_add corruption",
		"list_del corruption", "refcount_t:", "use-after-free", "scheduling while atomic",
		"sleeping function called from invalid context",
	};
	unsigned int i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (strstr(line, bad[i]))
			return 1;
	return 0;
}

/*
 * Prints every bad kernel log line ("kmsg_bad: ...") recorded since the kernel booted and
 * returns how many there were.
 */
static inline int rs_kmsg_scan(void)
{
	char rec[2048];
	int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC), n = 0;
	ssize_t len;

	if (fd < 0) {
		fprintf(stderr, "error: open /dev/kmsg: %s\n", strerror(errno));
		return 1;
	}
	for (;;) {
		len = read(fd, rec, sizeof(rec) - 1);
		if (len < 0) {
			if (errno == EPIPE)
				continue;	/* overwritten records: go on with the next */
			break;
		}
		rec[len] = 0;
		if (rs_kmsg_is_bad(rec)) {
			char *msg = strchr(rec, ';');

			printf("kmsg_bad: %s", msg ? msg + 1 : rec);
			n++;
		}
	}
	close(fd);
	return n;
}

/* Lowers the hung-task timeout so that a stuck task shows up within a test run. */
static inline void rs_hung_task_timeout(unsigned int seconds)
{
	char v[16];

	snprintf(v, sizeof(v), "%u", seconds);
	rs_write_file("/proc/sys/kernel/hung_task_timeout_secs", v);
}

#endif /* RNIC_TOOL_SYS_H */
