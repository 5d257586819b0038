// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: the ioctl envelope of both character devices (see rnic_ioctl.h).
 * It knows nothing about verbs or the GPU engine: it only finds the handler, copies the
 * argument in and out once, and takes the device's lock for LOCKED handlers.
 */
#include <linux/errno.h>
#include <linux/uaccess.h>

#include "rnic_ioctl.h"

long rnic_ioctl(const struct rnic_ioctl_ops *ops, void *ctx, unsigned int cmd,
		unsigned long arg)
{
	void __user *uarg = (void __user *)arg;
	const struct rnic_ioctl_desc *d = NULL;
	u64 buf[RNIC_IOCTL_MAX_ARG / sizeof(u64)];
	size_t size = _IOC_SIZE(cmd);
	unsigned int i;
	int ret;

	for (i = 0; i < ops->n; i++) {
		if (ops->descs[i].cmd == cmd) {
			d = &ops->descs[i];
			break;
		}
	}
	if (!d)
		return -ENOTTY;
	if (copy_from_user(buf, uarg, size))
		return -EFAULT;

	if (d->flags & RNIC_IOCTL_LOCKED) {
		ret = ops->lock(ctx);
		if (ret)
			return ret;
		ret = d->fn(ctx, buf);
		ops->unlock(ctx);
	} else {
		ret = d->fn(ctx, buf);
	}

	if ((!ret || (d->flags & RNIC_IOCTL_COPY_BACK_ON_ERROR)) && copy_to_user(uarg, buf, size))
		return -EFAULT;
	return ret;
}
