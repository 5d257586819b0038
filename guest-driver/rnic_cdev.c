// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: /dev/rnic_emuN, the verbs ioctls (include/uapi/rnic_emu_uapi.h).
 *
 * One misc device per RNIC. Each open file is a context owning its PDs, CQs, QPs and
 * MRs; release destroys them. The ioctls of a file are serialized by its mutex. When the
 * RNIC is removed while files are open, their objects are destroyed at once and later
 * calls fail with -ENODEV; the struct rnic_nic stays until the last file is closed.
 */
#include <linux/fs.h>
#include <linux/idr.h>
#include <linux/io.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "rnic_verbs.h"

/* Numbers the misc devices rnic_emu0, rnic_emu1, ... across RNICs. */
static DEFINE_IDA(rnic_cdev_ida);

static struct rnic_nic *rnic_file_nic(struct file *file)
{
	struct miscdevice *misc = file->private_data;

	return container_of(misc, struct rnic_nic, misc);
}

static int rnic_cdev_open(struct inode *inode, struct file *file)
{
	struct rnic_nic *nic = rnic_file_nic(file);
	struct rnic_ucontext *uc;

	uc = kzalloc(sizeof(*uc), GFP_KERNEL);
	if (!uc)
		return -ENOMEM;
	uc->nic = nic;
	mutex_init(&uc->lock);
	xa_init(&uc->pds);
	xa_init(&uc->cqs);
	xa_init(&uc->qps);
	xa_init(&uc->mrs);

	mutex_lock(&nic->files_lock);
	if (nic->dead) {
		mutex_unlock(&nic->files_lock);
		kfree(uc);
		return -ENODEV;
	}
	kref_get(&nic->ref);
	list_add(&uc->node, &nic->files);
	mutex_unlock(&nic->files_lock);

	file->private_data = uc;
	return nonseekable_open(inode, file);
}

static void rnic_ucontext_free(struct rnic_ucontext *uc)
{
	xa_destroy(&uc->mrs);
	xa_destroy(&uc->qps);
	xa_destroy(&uc->cqs);
	xa_destroy(&uc->pds);
	mutex_destroy(&uc->lock);
	kfree(uc);
}

static int rnic_cdev_release(struct inode *inode, struct file *file)
{
	struct rnic_ucontext *uc = file->private_data;
	struct rnic_nic *nic = uc->nic;

	/* files_lock keeps remove() from freeing the tables while this tears down. */
	mutex_lock(&nic->files_lock);
	mutex_lock(&uc->lock);
	if (!uc->dead)
		rnic_ucontext_destroy_objects(uc);
	list_del(&uc->node);
	mutex_unlock(&uc->lock);
	mutex_unlock(&nic->files_lock);

	rnic_ucontext_free(uc);
	rnic_nic_put(nic);
	return 0;
}

static void rnic_query_device(struct rnic_nic *nic, struct rnic_query_device *q)
{
	memset(q, 0, sizeof(*q));
	q->uapi_version = RNIC_UAPI_VERSION;
	q->hw_version = nic->rd.version;
	q->max_qp = nic->max_qp;
	q->max_cq = nic->max_cq;
	q->max_mr = nic->max_mr;
	q->max_ring_log2 = nic->max_ring_log2;
	q->max_sge = RNIC_UAPI_MAX_SGE;
	q->max_inline = RNIC_UAPI_MAX_INLINE;
	q->mtt_entries = RNIC_MTT_ENTRIES;
	q->num_vectors = nic->rd.nvec;
	q->max_mr_size = RNIC_UAPI_MAX_MR_SIZE;
	q->ipv4 = ioread32(nic->rd.bar0 + RNIC_REG_IPV4);
	q->node = rnic_node >= 0 ? rnic_node : RNIC_NODE_UNKNOWN;
}

union rnic_ioctl_arg {
	struct rnic_query_device query_device;
	struct rnic_alloc_pd pd;
	struct rnic_create_cq cq;
	struct rnic_create_qp qp;
	struct rnic_modify_qp modify_qp;
	struct rnic_query_qp query_qp;
	struct rnic_reg_mr mr;
	struct rnic_post post;
	struct rnic_poll_cq poll;
	struct rnic_mr_sync mr_sync;
};

static long rnic_cdev_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct rnic_ucontext *uc = file->private_data;
	void __user *uarg = (void __user *)arg;
	union rnic_ioctl_arg u;
	bool copy_back_on_error = false;
	size_t size = _IOC_SIZE(cmd);
	int ret;

	switch (cmd) {
	case RNIC_IOCTL_QUERY_DEVICE:
	case RNIC_IOCTL_ALLOC_PD:
	case RNIC_IOCTL_DEALLOC_PD:
	case RNIC_IOCTL_CREATE_CQ:
	case RNIC_IOCTL_DESTROY_CQ:
	case RNIC_IOCTL_CREATE_QP:
	case RNIC_IOCTL_DESTROY_QP:
	case RNIC_IOCTL_MODIFY_QP:
	case RNIC_IOCTL_QUERY_QP:
	case RNIC_IOCTL_REG_MR:
	case RNIC_IOCTL_DEREG_MR:
	case RNIC_IOCTL_POLL_CQ:
	case RNIC_IOCTL_MR_SYNC:
		break;
	case RNIC_IOCTL_POST_SEND:
	case RNIC_IOCTL_POST_RECV:
		copy_back_on_error = true;	/* num_posted says how far it got */
		break;
	default:
		return -ENOTTY;
	}
	if (WARN_ON_ONCE(size > sizeof(u)))
		return -EINVAL;
	if (copy_from_user(&u, uarg, size))
		return -EFAULT;

	ret = mutex_lock_interruptible(&uc->lock);
	if (ret)
		return ret;
	if (uc->dead) {
		ret = -ENODEV;
		goto out_unlock;
	}

	switch (cmd) {
	case RNIC_IOCTL_QUERY_DEVICE:
		rnic_query_device(uc->nic, &u.query_device);
		ret = 0;
		break;
	case RNIC_IOCTL_ALLOC_PD:
		ret = rnic_alloc_pd(uc, &u.pd);
		break;
	case RNIC_IOCTL_DEALLOC_PD:
		ret = rnic_dealloc_pd(uc, &u.pd);
		break;
	case RNIC_IOCTL_CREATE_CQ:
		ret = rnic_create_cq(uc, &u.cq);
		break;
	case RNIC_IOCTL_DESTROY_CQ:
		ret = rnic_destroy_cq(uc, u.cq.cqn);
		break;
	case RNIC_IOCTL_CREATE_QP:
		ret = rnic_create_qp(uc, &u.qp);
		break;
	case RNIC_IOCTL_DESTROY_QP:
		ret = rnic_destroy_qp(uc, u.qp.qpn);
		break;
	case RNIC_IOCTL_MODIFY_QP:
		ret = rnic_modify_qp(uc, &u.modify_qp);
		break;
	case RNIC_IOCTL_QUERY_QP:
		ret = rnic_query_qp(uc, &u.query_qp);
		break;
	case RNIC_IOCTL_REG_MR:
		ret = rnic_reg_mr(uc, &u.mr);
		break;
	case RNIC_IOCTL_DEREG_MR:
		ret = rnic_dereg_mr(uc, u.mr.index);
		break;
	case RNIC_IOCTL_POST_SEND:
		ret = rnic_post_send(uc, &u.post);
		break;
	case RNIC_IOCTL_POST_RECV:
		ret = rnic_post_recv(uc, &u.post);
		break;
	case RNIC_IOCTL_POLL_CQ:
		ret = rnic_poll_cq(uc, &u.poll);
		break;
	case RNIC_IOCTL_MR_SYNC:
		ret = rnic_mr_sync(uc, &u.mr_sync);
		break;
	}

out_unlock:
	mutex_unlock(&uc->lock);
	if ((!ret || copy_back_on_error) && copy_to_user(uarg, &u, size))
		return -EFAULT;
	return ret;
}

static const struct file_operations rnic_cdev_fops = {
	.owner		= THIS_MODULE,
	.open		= rnic_cdev_open,
	.release	= rnic_cdev_release,
	.unlocked_ioctl	= rnic_cdev_ioctl,
	.compat_ioctl	= compat_ptr_ioctl,
};

/**
 * rnic_cdev_register() - create /dev/rnic_emuN for an RNIC
 * @nic: the RNIC, with its verbs state set up
 *
 * Return: 0, or a negative errno with everything undone.
 */
int rnic_cdev_register(struct rnic_nic *nic)
{
	int id, ret;

	mutex_init(&nic->files_lock);
	INIT_LIST_HEAD(&nic->files);

	id = ida_alloc(&rnic_cdev_ida, GFP_KERNEL);
	if (id < 0) {
		dev_err(nic_dev(nic), "no free rnic_emu device number: %d\n", id);
		return id;
	}
	snprintf(nic->misc_name, sizeof(nic->misc_name), "rnic_emu%d", id);
	nic->misc_id = id;
	nic->misc.minor = MISC_DYNAMIC_MINOR;
	nic->misc.name = nic->misc_name;
	nic->misc.fops = &rnic_cdev_fops;
	nic->misc.parent = nic_dev(nic);
	nic->misc.mode = 0600;

	ret = misc_register(&nic->misc);
	if (ret) {
		dev_err(nic_dev(nic), "cannot register /dev/%s: %d\n", nic->misc_name, ret);
		ida_free(&rnic_cdev_ida, id);
		return ret;
	}
	return 0;
}

/*
 * Removes /dev/rnic_emuN (no open can be in progress afterwards: misc_open runs under the
 * misc lock), then destroys the objects of every file still open.
 */
void rnic_cdev_unregister(struct rnic_nic *nic)
{
	struct rnic_ucontext *uc;

	misc_deregister(&nic->misc);
	ida_free(&rnic_cdev_ida, nic->misc_id);

	mutex_lock(&nic->files_lock);
	nic->dead = true;
	list_for_each_entry(uc, &nic->files, node) {
		mutex_lock(&uc->lock);
		rnic_ucontext_destroy_objects(uc);
		uc->dead = true;
		mutex_unlock(&uc->lock);
	}
	mutex_unlock(&nic->files_lock);
	/* Pollers asleep on a CQ of those files wake up and fail with -ENODEV. */
	wake_up_all(&nic->rd.irq_wq);
}
