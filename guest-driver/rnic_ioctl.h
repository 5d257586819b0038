/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rnic-emu guest driver: the ioctl envelope both character devices share
 * (/dev/rnic_emuN and /dev/rnic_gpuN).
 *
 * A device lists its ioctls in a table: the command number, the handler, and flags. The
 * envelope accepts only listed commands (-ENOTTY otherwise), copies the argument in once
 * (its size is encoded in the command and checked against RNIC_IOCTL_MAX_ARG at build
 * time), takes the device's per-file lock for handlers marked LOCKED, and copies the
 * argument back on success (or always, for COPY_BACK_ON_ERROR handlers that report how far
 * they got). Handlers without LOCKED take the lock themselves, so that they can touch user
 * memory (which may fault for as long as user space wants: userfaultfd, FUSE) without it.
 */
#ifndef _RNIC_IOCTL_H
#define _RNIC_IOCTL_H

#include <linux/build_bug.h>
#include <linux/ioctl.h>
#include <linux/types.h>

/* The largest ioctl argument struct of either device. */
#define RNIC_IOCTL_MAX_ARG	128

#define RNIC_IOCTL_LOCKED		0x1	/* run under ops->lock */
#define RNIC_IOCTL_COPY_BACK_ON_ERROR	0x2	/* the argument says how far a failed call got */

struct rnic_ioctl_desc {
	unsigned int cmd;
	unsigned int flags;
	int (*fn)(void *ctx, void *arg);
};

/* A table entry; fails the build if the command's argument does not fit the envelope. */
#define RNIC_IOCTL(_cmd, _fn, _flags) {						\
	.cmd = (_cmd) + BUILD_BUG_ON_ZERO(_IOC_SIZE(_cmd) > RNIC_IOCTL_MAX_ARG),	\
	.flags = (_flags),							\
	.fn = (_fn),								\
}

struct rnic_ioctl_ops {
	const struct rnic_ioctl_desc *descs;
	unsigned int n;
	/* For LOCKED handlers: 0 with the lock held, or -errno (signal, device gone). */
	int (*lock)(void *ctx);
	void (*unlock)(void *ctx);
};

long rnic_ioctl(const struct rnic_ioctl_ops *ops, void *ctx, unsigned int cmd,
		unsigned long arg);

#endif /* _RNIC_IOCTL_H */
