// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: /dev/rnic_emuN, the verbs ioctls (include/uapi/rnic_emu_uapi.h).
 *
 * One misc device per RNIC. Each open file is a context owning its PDs, CQs, QPs and
 * MRs; release destroys them. The ioctls go through the envelope both devices share
 * (rnic_ioctl.c); the object work of a file is serialized by its mutex. When the RNIC is
 * removed while files are open, their objects are destroyed at once and later calls fail
 * with -ENODEV; the struct rnic_nic stays until the last file is closed.
 *
 * The uAPI constants that mirror the register contract are tied to it below.
 */
#include <linux/fs.h>
#include <linux/idr.h>
#include <linux/io.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "rnic_ioctl.h"
#include "rnic_verbs.h"

/* The uAPI's copies of contract values (rnic_emu_uapi.h) are the contract's. */
static_assert(RNIC_UOP_RDMA_WRITE == RNIC_WQE_OP_RDMA_WRITE);
static_assert(RNIC_UOP_RDMA_WRITE_IMM == RNIC_WQE_OP_RDMA_WRITE_IMM);
static_assert(RNIC_UOP_RDMA_READ == RNIC_WQE_OP_RDMA_READ);
static_assert(RNIC_UOP_SEND == RNIC_WQE_OP_SEND);
static_assert(RNIC_UOP_SEND_IMM == RNIC_WQE_OP_SEND_IMM);
static_assert(RNIC_USEND_SIGNALED == RNIC_WQE_FLAG_SIGNALED);
static_assert(RNIC_USEND_INLINE == RNIC_WQE_FLAG_INLINE);
static_assert(RNIC_USEND_SOLICITED == RNIC_WQE_FLAG_SOLICITED);
static_assert(RNIC_UACCESS_LOCAL_WRITE == RNIC_ACCESS_LOCAL_WRITE);
static_assert(RNIC_UACCESS_REMOTE_WRITE == RNIC_ACCESS_REMOTE_WRITE);
static_assert(RNIC_UACCESS_REMOTE_READ == RNIC_ACCESS_REMOTE_READ);
static_assert(RNIC_UQPS_RESET == RNIC_QPS_RESET);
static_assert(RNIC_UQPS_INIT == RNIC_QPS_INIT);
static_assert(RNIC_UQPS_RTR == RNIC_QPS_RTR);
static_assert(RNIC_UQPS_RTS == RNIC_QPS_RTS);
static_assert(RNIC_UQPS_ERR == RNIC_QPS_ERR);
/* The largest WQE stride is 256 bytes: a header and 14 SGEs, or 224 inline bytes. */
static_assert(RNIC_UAPI_MAX_SGE == (256 - sizeof(struct rnic_wqe)) / sizeof(struct rnic_sge));
static_assert(RNIC_UAPI_MAX_INLINE == 256 - sizeof(struct rnic_wqe));
static_assert(sizeof(struct rnic_usge) == sizeof(struct rnic_sge));
/* POST_* keep one WQE's SGEs in struct rnic_send_wr / rnic_recv_wr. */
static_assert(sizeof(((struct rnic_send_wr *)0)->sge) == RNIC_UAPI_MAX_SGE * sizeof(struct rnic_sge));

/* Numbers the misc devices rnic_emu0, rnic_emu1, ... across RNICs. */
static DEFINE_IDA(rnic_cdev_ida);

static struct rnic_nic *rnic_file_nic(struct file *file)
{
	struct miscdevice *misc = file->private_data;

	return container_of(misc, struct rnic_nic, misc);
}

static int rnic_cdev_open(struct inode *inode, struct file *file)
{
	struct rnic_ucontext *uc = rnic_uc_open(rnic_file_nic(file));

	if (IS_ERR(uc))
		return PTR_ERR(uc);
	file->private_data = uc;
	return nonseekable_open(inode, file);
}

static int rnic_cdev_release(struct inode *inode, struct file *file)
{
	rnic_uc_close(file->private_data);
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
	q->max_ring_bytes = RNIC_MAX_RING_BYTES;
	q->node = rnic_node >= 0 ? rnic_node : RNIC_NODE_UNKNOWN;
}

/*
 * The verbs ioctls. LOCKED handlers run under the file's mutex (rnic_uc_lock: fails with
 * -ENODEV once the RNIC is gone); REG_MR, POST_* and POLL_CQ touch user memory and take
 * the mutex themselves, only around the part that does not.
 */
static int rnic_ioc_query_device(void *uc, void *arg)
{
	rnic_query_device(((struct rnic_ucontext *)uc)->nic, arg);
	return 0;
}

static int rnic_ioc_alloc_pd(void *uc, void *arg)
{
	return rnic_alloc_pd(uc, arg);
}

static int rnic_ioc_dealloc_pd(void *uc, void *arg)
{
	return rnic_dealloc_pd(uc, arg);
}

static int rnic_ioc_create_cq(void *uc, void *arg)
{
	return rnic_create_cq(uc, arg);
}

static int rnic_ioc_destroy_cq(void *uc, void *arg)
{
	return rnic_destroy_cq(uc, ((struct rnic_create_cq *)arg)->cqn);
}

static int rnic_ioc_create_qp(void *uc, void *arg)
{
	return rnic_create_qp(uc, arg, NULL);
}

static int rnic_ioc_destroy_qp(void *uc, void *arg)
{
	return rnic_destroy_qp(uc, ((struct rnic_create_qp *)arg)->qpn);
}

static int rnic_ioc_modify_qp(void *uc, void *arg)
{
	return rnic_modify_qp(uc, arg, NULL);
}

static int rnic_ioc_query_qp(void *uc, void *arg)
{
	return rnic_query_qp(uc, arg);
}

static int rnic_ioc_reg_mr(void *uc, void *arg)
{
	return rnic_reg_mr(uc, arg);
}

static int rnic_ioc_dereg_mr(void *uc, void *arg)
{
	return rnic_dereg_mr(uc, ((struct rnic_reg_mr *)arg)->index);
}

static int rnic_ioc_post_send(void *uc, void *arg)
{
	return rnic_post_send(uc, arg);
}

static int rnic_ioc_post_recv(void *uc, void *arg)
{
	return rnic_post_recv(uc, arg);
}

static int rnic_ioc_poll_cq(void *uc, void *arg)
{
	return rnic_poll_cq(uc, arg);
}

static int rnic_ioc_mr_sync(void *uc, void *arg)
{
	return rnic_mr_sync(uc, arg);
}

static const struct rnic_ioctl_desc rnic_cdev_ioctls[] = {
	RNIC_IOCTL(RNIC_IOCTL_QUERY_DEVICE, rnic_ioc_query_device, RNIC_IOCTL_LOCKED),
	RNIC_IOCTL(RNIC_IOCTL_ALLOC_PD, rnic_ioc_alloc_pd, RNIC_IOCTL_LOCKED),
	RNIC_IOCTL(RNIC_IOCTL_DEALLOC_PD, rnic_ioc_dealloc_pd, RNIC_IOCTL_LOCKED),
	RNIC_IOCTL(RNIC_IOCTL_CREATE_CQ, rnic_ioc_create_cq, RNIC_IOCTL_LOCKED),
	RNIC_IOCTL(RNIC_IOCTL_DESTROY_CQ, rnic_ioc_destroy_cq, RNIC_IOCTL_LOCKED),
	RNIC_IOCTL(RNIC_IOCTL_CREATE_QP, rnic_ioc_create_qp, RNIC_IOCTL_LOCKED),
	RNIC_IOCTL(RNIC_IOCTL_DESTROY_QP, rnic_ioc_destroy_qp, RNIC_IOCTL_LOCKED),
	RNIC_IOCTL(RNIC_IOCTL_MODIFY_QP, rnic_ioc_modify_qp, RNIC_IOCTL_LOCKED),
	RNIC_IOCTL(RNIC_IOCTL_QUERY_QP, rnic_ioc_query_qp, RNIC_IOCTL_LOCKED),
	RNIC_IOCTL(RNIC_IOCTL_REG_MR, rnic_ioc_reg_mr, 0),
	RNIC_IOCTL(RNIC_IOCTL_DEREG_MR, rnic_ioc_dereg_mr, RNIC_IOCTL_LOCKED),
	/* num_posted says how far a failed call got */
	RNIC_IOCTL(RNIC_IOCTL_POST_SEND, rnic_ioc_post_send, RNIC_IOCTL_COPY_BACK_ON_ERROR),
	RNIC_IOCTL(RNIC_IOCTL_POST_RECV, rnic_ioc_post_recv, RNIC_IOCTL_COPY_BACK_ON_ERROR),
	RNIC_IOCTL(RNIC_IOCTL_POLL_CQ, rnic_ioc_poll_cq, 0),
	RNIC_IOCTL(RNIC_IOCTL_MR_SYNC, rnic_ioc_mr_sync, RNIC_IOCTL_LOCKED),
};

static int rnic_cdev_lock(void *uc)
{
	return rnic_uc_lock(uc);
}

static void rnic_cdev_unlock(void *uc)
{
	rnic_uc_unlock(uc);
}

static const struct rnic_ioctl_ops rnic_cdev_ioctl_ops = {
	.descs	= rnic_cdev_ioctls,
	.n	= ARRAY_SIZE(rnic_cdev_ioctls),
	.lock	= rnic_cdev_lock,
	.unlock	= rnic_cdev_unlock,
};

static long rnic_cdev_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	return rnic_ioctl(&rnic_cdev_ioctl_ops, file->private_data, cmd, arg);
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
 * Removes /dev/rnic_emuN: no open can be in progress afterwards (misc_open runs under the
 * misc lock), and no file can be added. The files still open keep working until
 * rnic_cdev_kill_files().
 */
void rnic_cdev_unregister(struct rnic_nic *nic)
{
	misc_deregister(&nic->misc);
	ida_free(&rnic_cdev_ida, nic->misc_id);
	mutex_lock(&nic->files_lock);
	nic->dead = true;
	mutex_unlock(&nic->files_lock);
}

/*
 * Destroys the objects of every file still open (after rnic_verbs_quiesce(): the engine
 * no longer uses any of their memory) and fails their later calls with -ENODEV. The
 * file mutexes are only ever held for work that does not wait on user space.
 */
void rnic_cdev_kill_files(struct rnic_nic *nic)
{
	struct rnic_ucontext *uc;

	mutex_lock(&nic->files_lock);
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
