// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: the GPU function (PCI driver "rnic_emu_gpu").
 *
 * Probes the emulated GPU: BAR0 control registers, contract checks, two MSI-X vectors,
 * and reports its BAR1 memory aperture (size, bus address) in sysfs. BAR1 is deliberately
 * not requested: user space maps it through /sys/bus/pci/devices/<bdf>/resource1, which
 * CONFIG_IO_STRICT_DEVMEM forbids for regions a driver has claimed.
 *
 * GPUDirect (docs/gpudirect.md): BAR1 is registered and published as PCI P2PDMA memory, so
 * user space allocates GPU memory by mmapping /sys/bus/pci/devices/<bdf>/p2pmem/allocate
 * and the RNIC driver can pin and DMA-map it. The GPU joins the module-wide registry
 * (rnic_p2p.c) that programs the RNICs' BAR1_APERTURE slots. /dev/rnic_gpuN
 * (include/uapi/rnic_emu_gpu_uapi.h) drives the copy/fill/reduce engine; the engine
 * signals the end of an operation on MSI-X vector RNIC_GPU_ENG_VECTOR. GPU_EXPORT_DMABUF
 * hands ranges of BAR1 out as dma-bufs (rnic_gpu_dmabuf.c).
 *
 * Removal never waits on user space: VA_TO_OFFSET pins outside dead_lock, a launch's wait
 * is killable and ends as soon as remove() marks the GPU dead, and the GPU's MRs at every
 * RNIC are revoked (rnic_p2p.c) before P2PDMA teardown waits for their pins. A GPU that
 * reads all-ones (its server died) fails launches with -ENODEV, logged once.
 */
#include <linux/fs.h>
#include <linux/idr.h>
#include <linux/io-64-nonatomic-lo-hi.h>
#include <linux/jiffies.h>
#include <linux/memremap.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/pci-p2pdma.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

#include "rnic_common.h"
#include "rnic_ioctl.h"
#include "rnic_p2p.h"
#include "uapi/rnic_emu_gpu_uapi.h"

/* MSI-X vectors of the GPU function (fixed by the device model). */
#define RNIC_GPU_NUM_VECTORS	2
#define RNIC_GPU_LAUNCH_TIMEOUT_MS	10000

struct rnic_gpu {
	struct rnic_dev common;		/* drvdata points here */
	u64 reg_mem_size;		/* GPU_REG_MEM_SIZE as read at probe */
	bool p2p;			/* BAR1 is published P2PDMA memory */
	struct rnic_p2p_gpu reg;	/* in the module-wide GPU registry */

	struct kref ref;		/* probe + one per open file of /dev/rnic_gpuN */
	struct rw_semaphore dead_lock;	/* ioctls (read) vs remove (write) */
	bool dead;			/* remove() started: fail calls, end waits */
	bool gone;			/* BAR0 reads all-ones (logged once) */
	atomic_t launch_pending;	/* a launch waits for the engine's vector */
	struct mutex launch_lock;	/* one engine operation at a time */

	int misc_id;
	char misc_name[32];
	struct miscdevice misc;
};

/* Numbers the misc devices rnic_gpu0, rnic_gpu1, ... across GPUs. */
static DEFINE_IDA(rnic_gpu_ida);

static void rnic_gpu_release_ref(struct kref *ref)
{
	kfree(container_of(ref, struct rnic_gpu, ref));
}

static struct rnic_gpu *rnic_file_gpu(struct file *file)
{
	return file->private_data;
}

/* misc_open() runs under the misc lock, so the device cannot be deregistered meanwhile. */
static int rnic_gpu_open(struct inode *inode, struct file *file)
{
	struct rnic_gpu *gpu = container_of(file->private_data, struct rnic_gpu, misc);

	kref_get(&gpu->ref);
	file->private_data = gpu;
	return nonseekable_open(inode, file);
}

static int rnic_gpu_release(struct inode *inode, struct file *file)
{
	struct rnic_gpu *gpu = rnic_file_gpu(file);

	kref_put(&gpu->ref, rnic_gpu_release_ref);
	return 0;
}

static void rnic_gpu_query(struct rnic_gpu *gpu, struct rnic_gpu_query *q)
{
	struct pci_dev *pdev = gpu->common.pdev;

	memset(q, 0, sizeof(*q));
	q->uapi_version = RNIC_GPU_UAPI_VERSION;
	q->gpu_index = gpu->misc_id;
	q->hw_version = gpu->common.version;
	q->p2p = gpu->p2p;
	q->bar1_size = gpu->reg.size;
	q->bar1_bus_addr = gpu->reg.bus_addr;
	q->pci_domain = pci_domain_nr(pdev->bus);
	q->pci_bus = pdev->bus->number;
	q->pci_devfn = pdev->devfn;
}

/*
 * Pins the page under @va (P2PDMA pages allowed), checks it is this GPU's BAR1. Runs
 * without dead_lock: the pin may wait on user space (userfaultfd, FUSE) for as long as it
 * likes, and needs nothing of the device (reg.phys and reg.size are set before the misc
 * device exists).
 */
static int rnic_gpu_va_to_offset(void *ctx, void *arg)
{
	struct rnic_gpu *gpu = ctx;
	struct rnic_gpu_va_to_offset *req = arg;
	struct device *dev = &gpu->common.pdev->dev;
	struct page *page;
	phys_addr_t phys;
	bool p2p;
	int ret;

	if (READ_ONCE(gpu->dead))
		return -ENODEV;
	if (req->va > TASK_SIZE_MAX)
		return -EINVAL;
	ret = pin_user_pages_fast(req->va & PAGE_MASK, 1, FOLL_PCI_P2PDMA, &page);
	if (ret != 1) {
		dev_dbg(dev, "GPU_VA_TO_OFFSET 0x%llx: cannot pin: %d\n", req->va, ret);
		return ret < 0 && ret != -EFAULT ? -EINVAL : -EFAULT;
	}
	phys = page_to_phys(page);
	p2p = is_pci_p2pdma_page(page);	/* while the pin keeps the page ours */
	unpin_user_page(page);
	if (!p2p || phys < gpu->reg.phys ||
	    phys - gpu->reg.phys >= gpu->reg.size) {
		dev_dbg(dev, "GPU_VA_TO_OFFSET 0x%llx: not memory of this GPU (phys %pa)\n",
			req->va, &phys);
		return -EINVAL;
	}
	req->offset = phys - gpu->reg.phys + (req->va & ~PAGE_MASK);
	return 0;
}

static int rnic_gpu_eng_errno(u32 result)
{
	switch (result) {
	case GPU_ENG_OK:
		return 0;
	case GPU_ENG_ERR_BUSY:
		return -EBUSY;
	case GPU_ENG_ERR_FATAL:
		/* The engine failed and stays failed until the GPU is reset (unbind/bind, FLR). */
		return -EIO;
	case GPU_ENG_ERR_RANGE:
	case GPU_ENG_ERR_ALIGN:
	case GPU_ENG_ERR_BAD_OP:
	default:
		return -EINVAL;
	}
}

/* True (and logged once) when the GPU's BAR0 reads all-ones: its server is gone. */
static bool rnic_gpu_is_gone(struct rnic_gpu *gpu)
{
	if (gpu->gone)
		return true;
	if (!rnic_dev_reads_ones(&gpu->common, GPU_REG_ID))
		return false;
	gpu->gone = true;
	dev_err(&gpu->common.pdev->dev, "GPU not responding (ID register reads 0xffffffff): device gone, calls now fail with -ENODEV\n");
	return true;
}

/* Interrupt hook: the engine's vector is expected while a launch waits for it. */
static bool rnic_gpu_vec_event(struct rnic_dev *rd, unsigned int vec)
{
	struct rnic_gpu *gpu = container_of(rd, struct rnic_gpu, common);

	return vec == RNIC_GPU_ENG_VECTOR && atomic_read(&gpu->launch_pending);
}

/*
 * One engine operation: program the registers, launch, wait for the engine's MSI-X vector
 * with GPU_ENG_DONE advanced (10 s; killable, and ended by remove()), read the result
 * from GPU_ENG_STATUS. Called under dead_lock (read).
 */
static int rnic_gpu_launch(void *ctx, void *arg)
{
	struct rnic_gpu *gpu = ctx;
	struct rnic_gpu_launch *req = arg;
	struct rnic_dev *rd = &gpu->common;
	void __iomem *bar0 = rd->bar0;
	struct device *dev = &rd->pdev->dev;
	struct rnic_vec *vec;
	u32 done0, status;
	s64 irq0;
	long left;
	int ret;

	if (req->pad)
		return -EINVAL;
	if (rd->nvec <= RNIC_GPU_ENG_VECTOR) {
		dev_warn_ratelimited(dev, "GPU_LAUNCH: no MSI-X vector %u for the engine\n",
				     RNIC_GPU_ENG_VECTOR);
		return -ENODEV;
	}
	vec = &rd->vecs[RNIC_GPU_ENG_VECTOR];

	req->result = 0;
	ret = mutex_lock_killable(&gpu->launch_lock);
	if (ret)
		return ret;
	if (READ_ONCE(gpu->dead) || rnic_gpu_is_gone(gpu)) {
		ret = -ENODEV;
		goto out;
	}
	writeq(req->src, bar0 + GPU_ENG_SRC);
	writeq(req->src2, bar0 + GPU_ENG_SRC2);
	writeq(req->dst, bar0 + GPU_ENG_DST);
	writeq(req->len, bar0 + GPU_ENG_LEN);
	iowrite32(req->value, bar0 + GPU_ENG_VALUE);
	iowrite32(RNIC_GPU_ENG_VECTOR, bar0 + GPU_ENG_VECTOR);
	done0 = ioread32(bar0 + GPU_ENG_DONE);
	irq0 = atomic64_read(&vec->count);
	atomic_set(&gpu->launch_pending, 1);
	iowrite32(req->op, bar0 + GPU_ENG_LAUNCH);

	left = wait_event_killable_timeout(rd->irq_wq,
					   READ_ONCE(gpu->dead) ||
					   (atomic64_read(&vec->count) != irq0 &&
					    ioread32(bar0 + GPU_ENG_DONE) != done0),
					   msecs_to_jiffies(RNIC_GPU_LAUNCH_TIMEOUT_MS));
	atomic_set(&gpu->launch_pending, 0);
	if (left < 0 || READ_ONCE(gpu->dead)) {
		ret = left < 0 ? left : -ENODEV;
		goto out;
	}
	status = ioread32(bar0 + GPU_ENG_STATUS);
	if (!left && rnic_gpu_is_gone(gpu)) {
		ret = -ENODEV;
		goto out;
	}
	if (!left) {
		dev_warn_ratelimited(dev, "GPU_LAUNCH op %u: no completion within %u ms (MSI-X vector %u %s, GPU_ENG_DONE %u -> %u, GPU_ENG_STATUS 0x%x)\n",
				     req->op, RNIC_GPU_LAUNCH_TIMEOUT_MS, RNIC_GPU_ENG_VECTOR,
				     atomic64_read(&vec->count) != irq0 ? "fired" : "did not fire",
				     done0, ioread32(bar0 + GPU_ENG_DONE), status);
		ret = -ETIMEDOUT;
		goto out;
	}
	req->result = (status >> 8) & 0xff;
	ret = rnic_gpu_eng_errno(req->result);
	if (ret)
		dev_dbg(dev, "GPU_LAUNCH op %u src 0x%llx src2 0x%llx dst 0x%llx len %llu: engine result %u\n",
			req->op, req->src, req->src2, req->dst, req->len, req->result);
out:
	mutex_unlock(&gpu->launch_lock);
	return ret;
}

/* GPU_EXPORT_DMABUF: a range of BAR1 as a dma-buf (rnic_gpu_dmabuf.c). */
static int rnic_gpu_export_dmabuf(void *ctx, void *arg)
{
	struct rnic_gpu *gpu = ctx;

	if (!gpu->p2p)
		return -EOPNOTSUPP;
	return rnic_gpu_dmabuf_export(&gpu->reg, arg);
}

static int rnic_gpu_ioc_query(void *gpu, void *arg)
{
	rnic_gpu_query(gpu, arg);
	return 0;
}

static const struct rnic_ioctl_desc rnic_gpu_ioctls[] = {
	RNIC_IOCTL(RNIC_GPU_IOCTL_QUERY, rnic_gpu_ioc_query, RNIC_IOCTL_LOCKED),
	RNIC_IOCTL(RNIC_GPU_IOCTL_VA_TO_OFFSET, rnic_gpu_va_to_offset, 0),
	/* result says what the engine reported */
	RNIC_IOCTL(RNIC_GPU_IOCTL_LAUNCH, rnic_gpu_launch,
		   RNIC_IOCTL_LOCKED | RNIC_IOCTL_COPY_BACK_ON_ERROR),
	RNIC_IOCTL(RNIC_GPU_IOCTL_EXPORT_DMABUF, rnic_gpu_export_dmabuf, RNIC_IOCTL_LOCKED),
};

/* dead_lock (read) for LOCKED ioctls: remove() takes it for writing once it marked dead. */
static int rnic_gpu_lock(void *ctx)
{
	struct rnic_gpu *gpu = ctx;
	int ret = down_read_killable(&gpu->dead_lock);

	if (ret)
		return ret;
	if (gpu->dead) {
		up_read(&gpu->dead_lock);
		return -ENODEV;
	}
	return 0;
}

static void rnic_gpu_unlock(void *ctx)
{
	struct rnic_gpu *gpu = ctx;

	up_read(&gpu->dead_lock);
}

static const struct rnic_ioctl_ops rnic_gpu_ioctl_ops = {
	.descs	= rnic_gpu_ioctls,
	.n	= ARRAY_SIZE(rnic_gpu_ioctls),
	.lock	= rnic_gpu_lock,
	.unlock	= rnic_gpu_unlock,
};

static long rnic_gpu_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	return rnic_ioctl(&rnic_gpu_ioctl_ops, rnic_file_gpu(file), cmd, arg);
}

/*
 * An open file holds a reference to the struct rnic_gpu; after remove() its ioctls fail
 * with -ENODEV (dead, checked under dead_lock, which remove() takes for writing).
 */
static const struct file_operations rnic_gpu_fops = {
	.owner		= THIS_MODULE,
	.open		= rnic_gpu_open,
	.release	= rnic_gpu_release,
	.unlocked_ioctl	= rnic_gpu_ioctl,
	.compat_ioctl	= compat_ptr_ioctl,
};

/* Registers BAR1 as P2PDMA memory; failure only disables GPUDirect. */
static void rnic_gpu_p2p_setup(struct rnic_gpu *gpu)
{
	struct pci_dev *pdev = gpu->common.pdev;
	int ret;

	ret = pci_p2pdma_add_resource(pdev, RNIC_EMU_GPU_MEM_BAR, 0, 0);
	if (ret) {
		dev_warn(&pdev->dev, "cannot register BAR%d as P2PDMA memory (%d): no GPUDirect RDMA to this GPU\n",
			 RNIC_EMU_GPU_MEM_BAR, ret);
		return;
	}
	pci_p2pmem_publish(pdev, true);
	gpu->p2p = true;
}

static const struct rnic_hw_desc rnic_gpu_hw = {
	.label		= "GPU",
	.id_magic	= RNIC_EMU_GPU_ID_MAGIC,
	.bar0_size	= RNIC_EMU_GPU_BAR0_SIZE,
	.reg_id		= GPU_REG_ID,
	.reg_version	= GPU_REG_VERSION,
	.reg_scratch	= GPU_REG_SCRATCH,
	.reg_int_trigger = GPU_REG_INT_TRIGGER,
};

static int rnic_gpu_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	const int mem_bar = RNIC_EMU_GPU_MEM_BAR;
	struct device *dev = &pdev->dev;
	resource_size_t mem_len;
	struct rnic_gpu *gpu;
	int ret;

	gpu = kzalloc(sizeof(*gpu), GFP_KERNEL);
	if (!gpu)
		return -ENOMEM;
	kref_init(&gpu->ref);
	init_rwsem(&gpu->dead_lock);

	ret = rnic_dev_setup(&gpu->common, pdev, &rnic_gpu_hw, RNIC_EMU_GPU_DRV_NAME);
	if (ret)
		goto err_free;

	mem_len = pci_resource_len(pdev, mem_bar);
	if (!(pci_resource_flags(pdev, mem_bar) & IORESOURCE_MEM) || !mem_len) {
		dev_err(dev, "BAR%d %pR is not a memory aperture\n",
			mem_bar, &pdev->resource[mem_bar]);
		ret = -ENODEV;
		goto err_teardown;
	}

	gpu->reg_mem_size = ioread64_lo_hi(gpu->common.bar0 + GPU_REG_MEM_SIZE);
	if (gpu->reg_mem_size != mem_len)
		dev_warn(dev, "GPU_REG_MEM_SIZE reports %llu bytes but BAR%d is %llu bytes\n",
			 gpu->reg_mem_size, mem_bar, (unsigned long long)mem_len);

	gpu->common.vec_event = rnic_gpu_vec_event;
	ret = rnic_irq_setup(&gpu->common, RNIC_GPU_NUM_VECTORS, RNIC_EMU_GPU_DRV_NAME);
	if (ret)
		goto err_teardown;

	pci_set_drvdata(pdev, &gpu->common);
	mutex_init(&gpu->launch_lock);

	/* What VA_TO_OFFSET and QUERY read, set before the misc device can be opened. */
	gpu->reg.pdev = pdev;
	gpu->reg.bus_addr = pci_bus_address(pdev, mem_bar);
	gpu->reg.phys = pci_resource_start(pdev, mem_bar);
	gpu->reg.size = mem_len;
	rnic_gpu_p2p_setup(gpu);

	ret = ida_alloc(&rnic_gpu_ida, GFP_KERNEL);
	if (ret < 0) {
		dev_err(dev, "no free rnic_gpu device number: %d\n", ret);
		goto err_irq;
	}
	gpu->misc_id = ret;
	snprintf(gpu->misc_name, sizeof(gpu->misc_name), "rnic_gpu%d", gpu->misc_id);
	gpu->misc.minor = MISC_DYNAMIC_MINOR;
	gpu->misc.name = gpu->misc_name;
	gpu->misc.fops = &rnic_gpu_fops;
	gpu->misc.parent = dev;
	gpu->misc.mode = 0600;
	ret = misc_register(&gpu->misc);
	if (ret) {
		dev_err(dev, "cannot register /dev/%s: %d\n", gpu->misc_name, ret);
		goto err_ida;
	}

	rnic_p2p_gpu_add(&gpu->reg);

	dev_info(dev, "rnic-emu GPU: id 0x%08x version %u.%u, %u MSI-X vectors, BAR0 %pR, BAR%d %pR (%llu bytes), GPU_REG_MEM_SIZE %llu\n",
		 gpu->common.id, rnic_version_major(gpu->common.version),
		 rnic_version_minor(gpu->common.version), gpu->common.nvec,
		 &pdev->resource[0], mem_bar, &pdev->resource[mem_bar],
		 (unsigned long long)mem_len, gpu->reg_mem_size);
	dev_info(dev, "rnic-emu GPU: /dev/%s, BAR%d bus address 0x%llx, P2PDMA memory %s\n",
		 gpu->misc_name, mem_bar, gpu->reg.bus_addr,
		 gpu->p2p ? "published" : "not available");
	return 0;

err_ida:
	ida_free(&rnic_gpu_ida, gpu->misc_id);
err_irq:
	mutex_destroy(&gpu->launch_lock);
	pci_set_drvdata(pdev, NULL);
	rnic_irq_teardown(&gpu->common);
err_teardown:
	rnic_dev_teardown(&gpu->common);
err_free:
	kfree(gpu);
	return ret;
}

static void rnic_gpu_remove(struct pci_dev *pdev)
{
	struct rnic_dev *rd = pci_get_drvdata(pdev);
	struct rnic_gpu *gpu = container_of(rd, struct rnic_gpu, common);

	/* Every RNIC revokes its MRs over this GPU's memory (P2PDMA teardown needs the pins). */
	rnic_p2p_gpu_remove(&gpu->reg);
	misc_deregister(&gpu->misc);
	ida_free(&rnic_gpu_ida, gpu->misc_id);
	/* Mark dead and wake a waiting launch, then wait for the ioctls in progress. */
	WRITE_ONCE(gpu->dead, true);
	wake_up_all(&rd->irq_wq);
	down_write(&gpu->dead_lock);
	up_write(&gpu->dead_lock);
	rnic_irq_teardown(rd);
	rnic_dev_teardown(rd);
	kref_put(&gpu->ref, rnic_gpu_release_ref);	/* open files keep it until closed */
}

static ssize_t mem_size_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct pci_dev *pdev = to_pci_dev(dev);

	return sysfs_emit(buf, "%llu\n",
			  (unsigned long long)pci_resource_len(pdev, RNIC_EMU_GPU_MEM_BAR));
}
static DEVICE_ATTR_RO(mem_size);

static ssize_t mem_bus_addr_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct pci_dev *pdev = to_pci_dev(dev);

	/*
	 * The address peers use for P2P DMA. pci_bus_address() equals pci_resource_start()
	 * where the host bridge does not translate (x86, QEMU q35).
	 */
	return sysfs_emit(buf, "0x%llx\n",
			  (unsigned long long)pci_bus_address(pdev, RNIC_EMU_GPU_MEM_BAR));
}
static DEVICE_ATTR_RO(mem_bus_addr);

static struct attribute *rnic_gpu_attrs[] = {
	&dev_attr_mem_size.attr,
	&dev_attr_mem_bus_addr.attr,
	NULL
};

static const struct attribute_group rnic_gpu_attr_group = {
	.attrs = rnic_gpu_attrs,
};

static const struct attribute_group *rnic_gpu_groups[] = {
	&rnic_common_attr_group,
	&rnic_gpu_attr_group,
	NULL
};

static const struct pci_device_id rnic_gpu_ids[] = {
	{ PCI_DEVICE(RNIC_EMU_VENDOR_ID, RNIC_EMU_GPU_DEVICE_ID) },
	{ }
};
MODULE_DEVICE_TABLE(pci, rnic_gpu_ids);

struct pci_driver rnic_gpu_driver = {
	.name		= RNIC_EMU_GPU_DRV_NAME,
	.id_table	= rnic_gpu_ids,
	.probe		= rnic_gpu_probe,
	.remove		= rnic_gpu_remove,
	/* Copied into .driver.dev_groups by pci_register_driver(). */
	.dev_groups	= rnic_gpu_groups,
};
