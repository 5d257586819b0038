// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: the MTT (docs/verbs.md §6, rnic_mtt.h): RNIC_MTT_ENTRIES 64-bit
 * page bus addresses in one DMA-coherent table the device reads, and its allocator, a
 * first-fit bitmap under nic->mtt_lock that hands each MR one range of entries. The
 * entries themselves are written by MR registration (rnic_mr.c).
 */
#include <linux/bitmap.h>
#include <linux/dma-mapping.h>

#include "rnic_mtt.h"
#include "rnic_verbs.h"

int rnic_mtt_init(struct rnic_nic *nic)
{
	mutex_init(&nic->mtt_lock);
	nic->mtt_map = bitmap_zalloc(RNIC_MTT_ENTRIES, GFP_KERNEL);
	if (!nic->mtt_map)
		goto err;
	nic->mtt = dma_alloc_coherent(nic_dev(nic), RNIC_MTT_ENTRIES * sizeof(*nic->mtt),
				      &nic->mtt_dma, GFP_KERNEL);
	if (!nic->mtt) {
		bitmap_free(nic->mtt_map);
		goto err;
	}
	return 0;

err:
	dev_err(nic_dev(nic), "cannot allocate the MTT (%u entries)\n", RNIC_MTT_ENTRIES);
	mutex_destroy(&nic->mtt_lock);
	return -ENOMEM;
}

void rnic_mtt_fini(struct rnic_nic *nic)
{
	dma_free_coherent(nic_dev(nic), RNIC_MTT_ENTRIES * sizeof(*nic->mtt), nic->mtt,
			  nic->mtt_dma);
	bitmap_free(nic->mtt_map);
	mutex_destroy(&nic->mtt_lock);
}

int rnic_mtt_alloc(struct rnic_nic *nic, u32 n, u32 *offset)
{
	unsigned long start;

	mutex_lock(&nic->mtt_lock);
	start = bitmap_find_next_zero_area(nic->mtt_map, RNIC_MTT_ENTRIES, 0, n, 0);
	if (start >= RNIC_MTT_ENTRIES) {
		mutex_unlock(&nic->mtt_lock);
		return -ENOMEM;
	}
	bitmap_set(nic->mtt_map, start, n);
	mutex_unlock(&nic->mtt_lock);
	*offset = start;
	return 0;
}

void rnic_mtt_free(struct rnic_nic *nic, u32 offset, u32 n)
{
	mutex_lock(&nic->mtt_lock);
	bitmap_clear(nic->mtt_map, offset, n);
	mutex_unlock(&nic->mtt_lock);
}
