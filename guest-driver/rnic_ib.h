/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rnic-emu guest driver: the RNIC as an RDMA device of the kernel's RDMA core (ib_core),
 * so libibverbs and the tools built on it (ibv_devinfo, perftest, ...) see it; see
 * docs/ibverbs.md. One device "rnicN" per RNIC, one RoCEv2 port whose GIDs come from the
 * RNIC's netdev (rnic_netdev.c).
 *
 * The verbs objects are the driver's own (rnic_pd.c, ...): the ib_core callbacks here are a
 * thin layer that wraps them in the structures ib_core allocates.
 */
#ifndef _RNIC_IB_H
#define _RNIC_IB_H

#include <linux/if_ether.h>
#include <linux/netdevice.h>
#include <rdma/ib_verbs.h>

#include "rnic_verbs.h"

struct rnic_ibdev {
	struct ib_device ibdev;		/* first: ib_alloc_device() */
	struct rnic_nic *nic;
	struct net_device *ndev;	/* the port's netdev (RoCE GIDs) */
};

struct rnic_ib_ucontext {
	struct ib_ucontext ibuc;
};

struct rnic_ib_pd {
	struct ib_pd ibpd;
	u32 pdn;
};

static inline struct rnic_ibdev *to_rnic_ibdev(struct ib_device *ibdev)
{
	return container_of(ibdev, struct rnic_ibdev, ibdev);
}

/* rnic_ib.c */
int rnic_ib_register(struct rnic_nic *nic);
void rnic_ib_unregister(struct rnic_nic *nic);

/* rnic_netdev.c */
void rnic_netdev_mac(u32 ipv4, u8 mac[ETH_ALEN]);
struct net_device *rnic_netdev_create(struct pci_dev *pdev, u32 ipv4);
void rnic_netdev_destroy(struct net_device *ndev);

#endif /* _RNIC_IB_H */
