/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rnic-emu guest driver: the state of the netdev rethN shared by its three files
 * (docs/registers.md, the ETH_* registers of contract minor 7):
 *   rnic_netdev.c          creation and removal, ndo_open/ndo_stop, MTU, MAC, receive mode,
 *                          carrier (ETH_LINK, polled), the pre-1.7 fallback (count and drop)
 *   rnic_netdev_ring.c     the transmit and receive rings of struct rnic_eth_desc: buffers,
 *                          ndo_start_xmit (scatter/gather, checksum and TSO requests of
 *                          minor 9), ndo_features_check, the interrupt and NAPI
 *   rnic_netdev_ethtool.c  ethtool: driver info, link settings, rings, statistics
 * Includes nothing of the driver (the RNIC is a forward-declared struct rnic_nic).
 */
#ifndef _RNIC_NETDEV_H
#define _RNIC_NETDEV_H

#include <linux/dma-mapping.h>
#include <linux/netdevice.h>
#include <linux/spinlock.h>
#include <linux/u64_stats_sync.h>
#include <linux/workqueue.h>

#include "uapi/rnic_emu_regs.h"

/* Ring sizes the driver uses (log2 of the entries), within the contract's range. */
#define RNIC_ETH_TX_LOG2		8
#define RNIC_ETH_RX_LOG2		10
/* The queue is woken when this many transmit descriptors are free again. */
#define RNIC_ETH_TX_WAKE		32
/*
 * Most descriptors the driver gives one frame (its head and its page fragments; a frame
 * with more is linearized first), within the contract's RNIC_ETH_TX_MAX_DESCS. The queue
 * stops while fewer are free, so that the next frame always fits.
 */
#define RNIC_ETH_TX_DESCS_MAX		min_t(u32, MAX_SKB_FRAGS + 1, RNIC_ETH_TX_MAX_DESCS)
/* How often ETH_LINK is read (the device raises no link interrupt). */
#define RNIC_ETH_LINK_POLL_MS		1000
#define RNIC_ETH_TX_TIMEOUT		(5 * HZ)

struct rnic_nic;

/*
 * A transmit slot: the piece of a frame the descriptor of the same index points at. The
 * frame's skb and its length (BQL's bytes) are kept in the slot of its last piece.
 */
struct rnic_eth_tx_buf {
	struct sk_buff *skb;
	dma_addr_t dma;
	u32 bytes;			/* last piece: skb->len as queued */
	u16 len;
	bool page;			/* mapped with skb_frag_dma_map(), else dma_map_single() */
};

/* A receive slot: the empty buffer the descriptor of the same index points at. */
struct rnic_eth_rx_buf {
	struct sk_buff *skb;
	dma_addr_t dma;
};

/* Counters of the NAPI poll (its only writer). */
struct rnic_eth_napi_stats {
	u64 rx_packets, rx_bytes;
	u64 rx_bad_desc;		/* a length beyond the posted buffer, or a runt */
	u64 rx_desc_errors;		/* DESC_ERR on a receive descriptor */
	u64 rx_alloc_failures;		/* no new buffer: the frame dropped, its buffer reposted */
	u64 tx_packets, tx_bytes;
	u64 tx_desc_errors;		/* DESC_ERR: the device refused the frame */
	u64 tx_wakes;
	u64 polls;
	struct u64_stats_sync syncp;
};

/* Counters of ndo_start_xmit (serialized by the queue's lock). */
struct rnic_eth_xmit_stats {
	u64 tx_dropped;			/* not sent: no Ethernet port, too long, no DMA mapping */
	u64 tx_stops;			/* the ring was full */
	u64 tx_linearized;		/* more fragments than descriptors: linearized */
	u64 tx_csum_help;		/* checksum the device could not take: done here */
	struct u64_stats_sync syncp;
};

/*
 * netdev_priv() of rethN. The rings and buffers exist between ndo_open and ndo_stop; the
 * indices are free-running 16-bit counters as the doorbells carry them (entry = index mod
 * ring size). tx_pi is written by ndo_start_xmit, tx_clean and rx_ci by the NAPI poll.
 */
struct rnic_eth {
	struct net_device *ndev;
	struct rnic_nic *nic;
	void __iomem *bar0;
	struct device *dmadev;
	bool has_eth;			/* RNIC_CAP_ETH: otherwise count and drop (pre-1.7) */
	bool has_offload;		/* RNIC_CAP_ETH_OFFLOAD (1.9): SG, checksum, TSO */
	unsigned int vector;		/* ETH_VECTOR: MSI-X vector of the rings */
	int irq;			/* its Linux irq */

	spinlock_t ctrl_lock;		/* guards ctrl and the ETH_CTRL writes */
	u32 ctrl;			/* what ETH_CTRL was last written */
	bool running;			/* rings allocated and started */
	atomic_t armed;			/* ETH_ARM written, its interrupt not yet taken */
	struct napi_struct napi;
	struct delayed_work link_work;

	struct rnic_eth_desc *tx_ring;
	dma_addr_t tx_ring_dma;
	struct rnic_eth_tx_buf *tx_buf;
	u16 tx_pi, tx_clean;

	struct rnic_eth_desc *rx_ring;
	dma_addr_t rx_ring_dma;
	struct rnic_eth_rx_buf *rx_buf;
	u16 rx_ci, rx_pi;
	u32 rx_buf_len;			/* what each receive buffer holds: MTU + 14 */

	struct rnic_eth_napi_stats nstats;
	struct rnic_eth_xmit_stats xstats;
	atomic64_t tx_timeouts;
	atomic64_t napi_kicks;		/* polls the link poll started: a done entry, no irq */
	u64 *hw_stats;			/* device counters as last read (ethtool) */
};

static inline u32 rnic_eth_ring_size(u32 log2)
{
	return 1U << log2;
}

/* rnic_netdev_ring.c */
int rnic_eth_rings_alloc(struct rnic_eth *eth);
void rnic_eth_rings_free(struct rnic_eth *eth);
void rnic_eth_arm(struct rnic_eth *eth);
bool rnic_eth_kick_stalled(struct rnic_eth *eth);
void rnic_eth_count_drop(struct rnic_eth *eth);
netdev_tx_t rnic_eth_xmit(struct sk_buff *skb, struct net_device *ndev);
netdev_features_t rnic_eth_features_check(struct sk_buff *skb, struct net_device *ndev,
					  netdev_features_t features);
int rnic_eth_poll(struct napi_struct *napi, int budget);

/* rnic_netdev_ethtool.c */
extern const struct ethtool_ops rnic_eth_ethtool_ops;
int rnic_eth_ethtool_init(struct rnic_eth *eth);
void rnic_eth_ethtool_fini(struct rnic_eth *eth);

/* rnic_netdev.c: whether the RNIC still answers (a register read all-ones: gone) */
bool rnic_eth_alive(struct rnic_eth *eth, u32 value);

#endif /* _RNIC_NETDEV_H */
