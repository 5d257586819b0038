/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rnic-emu guest driver: what the RNIC and GPU drivers share for GPUDirect RDMA
 * (docs/gpudirect.md).
 *
 * A module-wide registry of bound GPUs (BAR1 bus address, CPU physical range, pci_dev)
 * and of bound RNICs. Whenever either changes, every RNIC's BAR1_APERTURE slots are
 * reprogrammed: slot i names the i-th GPU in PCI-name order, unused slots are 0. The
 * registry also answers which GPU provides a P2PDMA page, and which path (switch or host
 * bridge) peer-to-peer DMA between an RNIC and a GPU takes. The GPU driver's dma-buf
 * exporter (rnic_gpu_dmabuf.c) is declared here too: the RNIC's MRs import its buffers.
 */
#ifndef _RNIC_P2P_H
#define _RNIC_P2P_H

#include <linux/list.h>
#include <linux/pci.h>
#include <linux/types.h>

struct dma_buf;
struct rnic_gpu_export_dmabuf;
struct rnic_nic;

/* One bound GPU; embedded in the GPU driver's state. */
struct rnic_p2p_gpu {
	struct list_head node;		/* in the registry, sorted by pci_name() */
	struct pci_dev *pdev;
	u64 bus_addr;			/* pci_bus_address(pdev, BAR1) */
	resource_size_t phys;		/* pci_resource_start(pdev, BAR1) (CPU physical) */
	resource_size_t size;
};

void rnic_p2p_gpu_add(struct rnic_p2p_gpu *gpu);
/* Takes the GPU out, clears its aperture slots and revokes every MR over its memory. */
void rnic_p2p_gpu_remove(struct rnic_p2p_gpu *gpu);
void rnic_p2p_nic_add(struct rnic_nic *nic);
void rnic_p2p_nic_remove(struct rnic_nic *nic);

/* The GPU whose BAR1 holds @phys, with a reference (pci_dev_put() it), or NULL. */
struct pci_dev *rnic_p2p_find_provider(phys_addr_t phys);

/* Whether @provider is still a registered GPU (false once its removal started). */
bool rnic_p2p_provider_live(struct pci_dev *provider);

/* RNIC_MR_PATH_P2P_SWITCH or RNIC_MR_PATH_P2P_HOST_BRIDGE for @client <-> @provider. */
u32 rnic_p2p_path(struct pci_dev *client, struct pci_dev *provider);

/* rnic_gpu_dmabuf.c: BAR1 ranges as dma-bufs (GPU_EXPORT_DMABUF). */
int rnic_gpu_dmabuf_export(struct rnic_p2p_gpu *gpu, struct rnic_gpu_export_dmabuf *req);
/* The GPU that exported @dmabuf, with a reference (pci_dev_put() it), or NULL. */
struct pci_dev *rnic_gpu_dmabuf_provider(struct dma_buf *dmabuf);

#endif /* _RNIC_P2P_H */
