/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR Apache-2.0 */
/*
 * rnic-emu GPU uAPI: the ioctls of /dev/rnic_gpuN (hand-written). One misc device per bound
 * GPU function; N numbers the GPUs in probe (PCI) order. GPU memory itself is allocated by
 * mmapping /sys/bus/pci/devices/<gpu>/p2pmem/allocate (MAP_SHARED); the engine works on
 * offsets into BAR1, which GPU_VA_TO_OFFSET gives for such a mapping.
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
#define RNIC_GPU_UAPI_VERSION		1

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

#define RNIC_GPU_IOCTL_QUERY		_IOWR('G', 0x10, struct rnic_gpu_query)
#define RNIC_GPU_IOCTL_VA_TO_OFFSET	_IOWR('G', 0x11, struct rnic_gpu_va_to_offset)
#define RNIC_GPU_IOCTL_LAUNCH		_IOWR('G', 0x12, struct rnic_gpu_launch)

#endif /* _UAPI_RNIC_EMU_GPU_UAPI_H */
