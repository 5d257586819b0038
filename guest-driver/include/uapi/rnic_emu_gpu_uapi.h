/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR Apache-2.0 */
/*
 * rnic-emu GPU uAPI: the ioctls of /dev/rnic_gpuN (hand-written). One misc device per bound
 * GPU function; N numbers the GPUs in probe (PCI) order. GPU memory itself is allocated by
 * mmapping /sys/bus/pci/devices/<gpu>/p2pmem/allocate (MAP_SHARED); the engine works on
 * offsets into BAR1, which GPU_VA_TO_OFFSET gives for such a mapping. GPU_EXPORT_DMABUF
 * hands a range of BAR1 to other drivers as a dma-buf (ibv_reg_dmabuf_mr, docs/gpudirect.md).
 *
 * Every ioctl is _IOWR('G', n, struct ...) with n >= 0x10; padding must be zero.
 * Errors: -EINVAL malformed request or engine RANGE/ALIGN/BAD_OP; -EBUSY engine busy;
 * -ETIMEDOUT no completion within 10 s; -EFAULT bad pointer; -ENODEV the GPU is gone.
 */
#ifndef _UAPI_RNIC_EMU_GPU_UAPI_H
#define _UAPI_RNIC_EMU_GPU_UAPI_H

#include <linux/ioctl.h>
#include <linux/types.h>

/* Bumped on any incompatible change of the structs or semantics below. */
#define RNIC_GPU_UAPI_VERSION		2	/* 2: GPU_EXPORT_DMABUF */

/* MSI-X vector the driver gives the engine (GPU_ENG_VECTOR). */
#define RNIC_GPU_ENG_VECTOR		1

struct rnic_gpu_query {
	__u32 uapi_version;		/* out: RNIC_GPU_UAPI_VERSION */
	__u32 gpu_index;		/* out: N of /dev/rnic_gpuN */
	__u32 hw_version;		/* out: GPU_REG_VERSION, major << 16 | minor */
	__u32 p2p;			/* out: 1 if BAR1 is published as P2PDMA memory */
	__aligned_u64 bar1_size;	/* out: bytes */
	__aligned_u64 bar1_bus_addr;	/* out: pci_bus_address(gpu, 1) */
	__u32 pci_domain;		/* out: the function's PCI address */
	__u32 pci_bus;
	__u32 pci_devfn;		/* out: device << 3 | function */
	__u32 pad;
};

/* A user virtual address inside a p2pmem mapping of THIS GPU -> offset in BAR1. */
struct rnic_gpu_va_to_offset {
	__aligned_u64 va;		/* in */
	__aligned_u64 offset;		/* out */
};

/*
 * GPU_LAUNCH: runs one engine operation (GPU_ENG_OP_* of rnic_emu_regs.h) on BAR1 offsets
 * and waits for it. Launches of one GPU are serialized. Returns 0 when the engine reported
 * GPU_ENG_OK; otherwise the engine's result is mapped to an errno (RANGE, ALIGN, BAD_OP:
 * -EINVAL; BUSY: -EBUSY) and also returned in `result`.
 */
struct rnic_gpu_launch {
	__u32 op;			/* in: GPU_ENG_OP_* */
	__u32 value;			/* in: FILL32 value */
	__aligned_u64 src;		/* in: BAR1 offset (COPY, REDUCE) */
	__aligned_u64 src2;		/* in: BAR1 offset (REDUCE) */
	__aligned_u64 dst;		/* in: BAR1 offset */
	__aligned_u64 len;		/* in: bytes */
	__u32 result;			/* out: GPU_ENG_STATUS [15:8] (GPU_ENG_OK, GPU_ENG_ERR_*) */
	__u32 pad;
};

/*
 * GPU_EXPORT_DMABUF: a dma-buf over [offset, offset + length) of BAR1 (the GPU's P2PDMA
 * pages), as a new file descriptor. offset and length are multiples of 4096, length > 0,
 * the range inside BAR1. The buffer cannot be mmapped or read by the CPU through the
 * dma-buf; it is for importers that DMA to it (the RNIC: ibv_reg_dmabuf_mr). Each
 * importer's mapping is decided by Linux's P2PDMA rules for that device; a device the GPU
 * cannot reach peer-to-peer gets -EREMOTEIO from its map. The buffer outlives the GPU:
 * after the GPU is removed, new attachments and mappings fail with -ENODEV.
 * Errors: -EINVAL bad range or flags; -EOPNOTSUPP BAR1 is not P2PDMA memory; -ENODEV.
 */
#define RNIC_GPU_DMABUF_CLOEXEC		0x1	/* the fd gets O_CLOEXEC */

struct rnic_gpu_export_dmabuf {
	__aligned_u64 offset;		/* in: BAR1 offset */
	__aligned_u64 length;		/* in: bytes */
	__u32 flags;			/* in: RNIC_GPU_DMABUF_* */
	__s32 fd;			/* out: the dma-buf */
};

#define RNIC_GPU_IOCTL_QUERY		_IOWR('G', 0x10, struct rnic_gpu_query)
#define RNIC_GPU_IOCTL_VA_TO_OFFSET	_IOWR('G', 0x11, struct rnic_gpu_va_to_offset)
#define RNIC_GPU_IOCTL_LAUNCH		_IOWR('G', 0x12, struct rnic_gpu_launch)
#define RNIC_GPU_IOCTL_EXPORT_DMABUF	_IOWR('G', 0x13, struct rnic_gpu_export_dmabuf)

#endif /* _UAPI_RNIC_EMU_GPU_UAPI_H */
