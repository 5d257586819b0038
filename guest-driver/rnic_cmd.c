// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: the command channel and queue memory (docs/verbs.md §2), the
 * lowest layer of the verbs core: device commands (rnic_cmd(), rnic_cmd_release()) and
 * their errors; surprise-removal detection (rnic_nic_alive()); a context's mutex, refused
 * once the RNIC is gone (rnic_uc_lock()); the memory of QP and CQ rings, their user
 * mappings (rnic_ib_mmap.c), and the zombie list a ring goes to when the device refused
 * to let go of it (freed by rnic_zombies_free(), rnic_uctx.c, once the engine is stopped).
 *
 * Everything above uses this file; it calls only the fault hooks (rnic_fault.h) and the
 * common BAR0 helpers (rnic_common.c), never the objects or the contexts.
 *
 * A device that answers all-ones (its server died, or it was surprise-removed) is
 * detected, logged once and every later call fails with -ENODEV.
 */
#include <linux/dma-mapping.h>
#include <linux/io.h>
#include <linux/jiffies.h>
#include <linux/slab.h>

#include "rnic_fault.h"
#include "rnic_verbs.h"

static const char *const rnic_cmd_names[] = {
	[RNIC_CMD_CREATE_CQ]	= "CREATE_CQ",
	[RNIC_CMD_DESTROY_CQ]	= "DESTROY_CQ",
	[RNIC_CMD_MODIFY_QP]	= "MODIFY_QP",
	[RNIC_CMD_QUERY_QP]	= "QUERY_QP",
	[RNIC_CMD_DESTROY_QP]	= "DESTROY_QP",
	[RNIC_CMD_REG_MR]	= "REG_MR",
	[RNIC_CMD_DEREG_MR]	= "DEREG_MR",
	[RNIC_CMD_SET_GID]	= "SET_GID",
	[RNIC_CMD_SET_EQ]	= "SET_EQ",
};

static const char *const rnic_cmd_err_names[] = {
	[RNIC_CMD_ERR_BAD_OP]		= "BAD_OP",
	[RNIC_CMD_ERR_BAD_INDEX]	= "BAD_INDEX",
	[RNIC_CMD_ERR_DMA]		= "DMA",
	[RNIC_CMD_ERR_INVALID]		= "INVALID",
	[RNIC_CMD_ERR_BUSY]		= "BUSY",
	[RNIC_CMD_ERR_STATE]		= "STATE",
	[RNIC_CMD_ERR_NOT_FOUND]	= "NOT_FOUND",
	[RNIC_CMD_ERR_DISABLED]		= "DISABLED",
	[RNIC_CMD_ERR_FATAL]		= "FATAL",
	[RNIC_CMD_BUSY]			= "BUSY (not completed)",
	[RNIC_CMD_ERR_NO_RESOURCES]	= "NO_RESOURCES",
	[RNIC_CMD_ERR_TIMEOUT]		= "TIMEOUT (never ran; device fatal)",
};

static int rnic_cmd_errno(u32 status)
{
	switch (status) {
	case RNIC_CMD_ERR_BAD_INDEX:
	case RNIC_CMD_ERR_INVALID:
	case RNIC_CMD_ERR_STATE:
		return -EINVAL;
	case RNIC_CMD_ERR_BUSY:
		return -EBUSY;
	case RNIC_CMD_ERR_NOT_FOUND:
		return -ENOENT;
	case RNIC_CMD_ERR_BAD_OP:
		return -EOPNOTSUPP;
	case RNIC_CMD_ERR_NO_RESOURCES:
		return -ENOMEM;
	case RNIC_CMD_ERR_TIMEOUT:
		return -ETIMEDOUT;
	case RNIC_CMD_ERR_DMA:
	case RNIC_CMD_ERR_DISABLED:
	default:
		return -EIO;
	}
}

/**
 * rnic_nic_alive() - whether the RNIC still answers
 * @nic: the RNIC
 *
 * A function whose server died or that was surprise-removed reads all-ones. The first
 * time the ID register does, the RNIC is marked gone and that is logged once; from then
 * on every call fails with -ENODEV and remove() frees everything without commands.
 */
bool rnic_nic_alive(struct rnic_nic *nic)
{
	if (test_bit(RNIC_NIC_GONE, &nic->flags))
		return false;
	if (!rnic_dev_reads_ones(&nic->rd, RNIC_REG_ID))
		return true;
	if (!test_and_set_bit(RNIC_NIC_GONE, &nic->flags)) {
		dev_err(nic_dev(nic), "RNIC not responding (ID register reads 0xffffffff): device gone, calls now fail with -ENODEV\n");
		rnic_fault_gone(nic);
	}
	wake_up_all(&nic->rd.irq_wq);
	return false;
}

/* rnic_nic_alive(), but reading the register at most every RNIC_ALIVE_CHECK_MS. */
bool rnic_nic_alive_ratelimited(struct rnic_nic *nic)
{
	unsigned long next = READ_ONCE(nic->next_alive_check);

	if (test_bit(RNIC_NIC_GONE, &nic->flags))
		return false;
	if (time_before(jiffies, next))
		return true;
	WRITE_ONCE(nic->next_alive_check, jiffies + msecs_to_jiffies(RNIC_ALIVE_CHECK_MS));
	if (!rnic_nic_alive(nic))
		return false;
	rnic_fault_check_status(nic);	/* a fatal state whose interrupt never came */
	return true;
}

/**
 * rnic_cmd() - run one device command (docs/verbs.md §2)
 * @nic: the RNIC; the caller holds nic->cmd_lock and has written the object's context
 * @op: RNIC_CMD_*
 * @index: object index
 *
 * Return: 0, or the command's error as a negative errno (logged, rate-limited); -ENODEV
 * once the engine is stopped or the device is gone.
 */
int rnic_cmd(struct rnic_nic *nic, u32 op, u32 index)
{
	void __iomem *bar0 = nic->rd.bar0;
	u32 status;

	lockdep_assert_held(&nic->cmd_lock);
	if (nic->quiesced || test_bit(RNIC_NIC_GONE, &nic->flags))
		return -ENODEV;
	iowrite32(op << RNIC_CMD_OP_SHIFT | index, bar0 + RNIC_REG_CMD);
	status = ioread32(bar0 + RNIC_REG_CMD_STATUS);
	if (status == RNIC_CMD_OK)
		return 0;
	if (status == 0xffffffff && !rnic_nic_alive(nic))
		return -ENODEV;
	status = rnic_fault_cmd_status(nic, op, index, status);	/* BUSY, FATAL: rnic_fault.c */
	if (status == RNIC_CMD_OK)
		return 0;
	if (status == RNIC_CMD_BUSY)
		return -ETIMEDOUT;

	atomic64_inc(&nic->stats.cmd_errors);
	dev_warn_ratelimited(nic_dev(nic), "command %s index %u failed: %s (%u)\n",
			     op < ARRAY_SIZE(rnic_cmd_names) && rnic_cmd_names[op] ?
			     rnic_cmd_names[op] : "?", index,
			     status < ARRAY_SIZE(rnic_cmd_err_names) && rnic_cmd_err_names[status] ?
			     rnic_cmd_err_names[status] : "unknown", status);
	return rnic_cmd_errno(status);
}

/**
 * rnic_cmd_release() - run a destroy command; may the object's memory be freed?
 * @nic: the RNIC (cmd_lock not held)
 * @op: RNIC_CMD_DESTROY_QP, RNIC_CMD_DESTROY_CQ or RNIC_CMD_DEREG_MR
 * @index: object index
 *
 * Return: true when the device no longer uses the object: the command succeeded, the
 * device did not know it (NOT_FOUND), the engine was already reset and stopped, or the
 * device is gone. False when it refused: the caller must keep the memory (zombie).
 */
bool rnic_cmd_release(struct rnic_nic *nic, u32 op, u32 index)
{
	int ret;

	mutex_lock(&nic->cmd_lock);
	ret = rnic_cmd(nic, op, index);
	mutex_unlock(&nic->cmd_lock);
	return !ret || ret == -ENOENT || ret == -ENODEV;
}

/* Ring memory (QP and CQ rings): bounded, never warns, charged to the caller's memcg. */
void *rnic_ring_alloc(struct rnic_nic *nic, size_t size, dma_addr_t *dma)
{
	if (size > RNIC_MAX_RING_BYTES)
		return NULL;
	return dma_alloc_coherent(nic_dev(nic), size, dma, RNIC_RING_GFP);
}

/*
 * Rings mapped into user space (rnic_ib_mmap.c) are freed by whichever comes last: their
 * object's destruction (rnic_ring_free()) or their last unmap (rnic_ring_map_put()), so a
 * process that keeps a mapping after destroying the object never sees freed memory.
 */
int rnic_ring_map_add(struct rnic_nic *nic, struct rnic_ring_map *m)
{
	return xa_insert(&nic->ring_maps, (unsigned long)m->ring >> PAGE_SHIFT, m, GFP_KERNEL);
}

/* rnic_ring_free() of a mapped ring: the last unmap frees it. True if @ring is mapped. */
static bool rnic_ring_map_orphan(struct rnic_nic *nic, void *ring, bool device_let_go)
{
	struct rnic_ring_map *m;

	xa_lock(&nic->ring_maps);
	m = xa_load(&nic->ring_maps, (unsigned long)ring >> PAGE_SHIFT);
	if (m) {
		m->orphaned = true;
		m->let_go = device_let_go;
		__xa_erase(&nic->ring_maps, (unsigned long)ring >> PAGE_SHIFT);
	}
	xa_unlock(&nic->ring_maps);
	return m;
}

/* The last unmap of a ring: frees it if its object is gone already. */
void rnic_ring_map_put(struct rnic_nic *nic, struct rnic_ring_map *m)
{
	bool orphaned;

	xa_lock(&nic->ring_maps);
	orphaned = m->orphaned;
	if (!orphaned)
		__xa_erase(&nic->ring_maps, (unsigned long)m->ring >> PAGE_SHIFT);
	xa_unlock(&nic->ring_maps);
	if (orphaned)
		rnic_ring_free(nic, m->ring, m->size, m->dma, m->let_go);
}

/* Frees a ring, or keeps it on the zombie list when the device did not let go of it. */
void rnic_ring_free(struct rnic_nic *nic, void *ring, size_t size, dma_addr_t dma,
		    bool device_let_go)
{
	struct rnic_zombie_ring *z;

	if (!ring || rnic_ring_map_orphan(nic, ring, device_let_go))
		return;
	if (device_let_go) {
		dma_free_coherent(nic_dev(nic), size, ring, dma);
		return;
	}
	atomic64_add(size, &nic->stats.zombie_bytes);
	z = kmalloc(sizeof(*z), GFP_KERNEL | __GFP_NOFAIL);
	z->ring = ring;
	z->size = size;
	z->dma = dma;
	mutex_lock(&nic->zombie_lock);
	list_add(&z->node, &nic->zombie_rings);
	mutex_unlock(&nic->zombie_lock);
	dev_warn_ratelimited(nic_dev(nic), "the device refused to release a ring of %zu bytes: kept until the device is removed\n",
			     size);
}

/* Takes the file's mutex for an ioctl: -EINTR on a signal, -ENODEV once the RNIC is gone. */
int rnic_uc_lock(struct rnic_ucontext *uc)
{
	int ret = mutex_lock_interruptible(&uc->lock);

	if (ret)
		return ret;
	if (uc->dead || test_bit(RNIC_NIC_GONE, &uc->nic->flags)) {
		mutex_unlock(&uc->lock);
		return -ENODEV;
	}
	return 0;
}

void rnic_uc_unlock(struct rnic_ucontext *uc)
{
	mutex_unlock(&uc->lock);
}
