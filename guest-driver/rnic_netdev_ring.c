// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: the data path of the netdev rethN (contract minor 7,
 * docs/registers.md): one transmit and one receive ring of struct rnic_eth_desc, the
 * Ethernet interrupt, and the NAPI poll.
 *
 * Ownership of a descriptor: the driver writes addr and len with flags 0, then (dma_wmb)
 * moves the ring's producer index register; the device writes len (receive) and then
 * flags with DESC_DONE. The driver reads flags, then (dma_rmb) len and the data. Only the
 * entries between the driver's consumer and producer indices are ever looked at, and a
 * received length is checked against the buffer posted for that entry (never the
 * descriptor's own len field, which the device overwrote), so a device that writes what
 * it likes into the rings cannot make the driver read past a buffer or free a frame twice.
 *
 * Transmit: a frame is DMA-mapped where it lies: no copy into a bounce slot beyond what
 * swiotlb does itself. With RNIC_CAP_ETH_OFFLOAD (minor 9) the netdev offers
 * scatter/gather, NETIF_F_HW_CSUM and TSO/TSO6: a frame takes one descriptor for its head
 * and one per page fragment (RNIC_ETH_TX_MORE on all but the last; one with more
 * fragments than RNIC_ETH_TX_DESCS_MAX is linearized), and its first descriptor carries
 * the checksum request (csum_start, csum_offset) and for a GSO frame the MSS: the device
 * computes the checksum and cuts the segments. ndo_features_check leaves to the stack what
 * the device does not segment. Without the capability every frame is one linear
 * descriptor with flags 0, as before. Frames shorter than 60 bytes are padded (the device
 * pads nothing). BQL accounts bytes in flight; the skb is kept in the slot of its frame's
 * last descriptor and freed when that one is done.
 *
 * Receive: one skb per entry, ETH_MTU + 14 bytes, mapped DMA_FROM_DEVICE and unmapped
 * when a frame is handed to GRO; one the device marked RNIC_ETH_DESC_CSUM_OK (minor 9,
 * ETH_CTRL_RX_CSUM) goes up CHECKSUM_UNNECESSARY while NETIF_F_RXCSUM is on. When no
 * new skb can be had the frame is dropped and its buffer posted again, so every entry
 * always holds a buffer.
 *
 * Interrupts: the NAPI poll re-arms with ETH_ARM (rx_ci << 16 | tx_clean) when it has
 * caught up; the device raises the vector once, at once if it has moved either ring past
 * those indices. The vector may be shared with CQs (rnic_netdev.c picks it): the handler
 * claims the interrupt only while the netdev is armed.
 */
#include <linux/etherdevice.h>
#include <linux/io.h>
#include <linux/ipv6.h>
#include <linux/netdevice.h>
#include <linux/skbuff.h>
#include <linux/slab.h>

#include "rnic_ib.h"
#include "rnic_netdev.h"

static inline u16 rnic_eth_tx_mask(void)
{
	return rnic_eth_ring_size(RNIC_ETH_TX_LOG2) - 1;
}

static inline u16 rnic_eth_rx_mask(void)
{
	return rnic_eth_ring_size(RNIC_ETH_RX_LOG2) - 1;
}

/* Free transmit descriptors; either index may move concurrently (xmit vs. NAPI). */
static u32 rnic_eth_tx_free(struct rnic_eth *eth)
{
	u16 used = READ_ONCE(eth->tx_pi) - READ_ONCE(eth->tx_clean);

	return rnic_eth_ring_size(RNIC_ETH_TX_LOG2) - used;
}

/* Unmaps the piece of a frame in transmit slot @b (len 0: the slot holds none). */
static void rnic_eth_tx_unmap(struct rnic_eth *eth, struct rnic_eth_tx_buf *b)
{
	if (b->page)
		dma_unmap_page(eth->dmadev, b->dma, b->len, DMA_TO_DEVICE);
	else
		dma_unmap_single(eth->dmadev, b->dma, b->len, DMA_TO_DEVICE);
	b->len = 0;
}

static int rnic_eth_rx_buf_new(struct rnic_eth *eth, struct rnic_eth_rx_buf *b, bool in_napi)
{
	struct sk_buff *skb;
	dma_addr_t dma;

	if (in_napi)
		skb = napi_alloc_skb(&eth->napi, eth->rx_buf_len);
	else
		skb = __netdev_alloc_skb_ip_align(eth->ndev, eth->rx_buf_len, GFP_KERNEL);
	if (!skb)
		return -ENOMEM;
	dma = dma_map_single(eth->dmadev, skb->data, eth->rx_buf_len, DMA_FROM_DEVICE);
	if (dma_mapping_error(eth->dmadev, dma)) {
		dev_kfree_skb_any(skb);
		return -ENOMEM;
	}
	b->skb = skb;
	b->dma = dma;
	return 0;
}

/* Gives the buffer of entry @idx to the device (visible once ETH_RXQ_PI passes @idx). */
static void rnic_eth_rx_post(struct rnic_eth *eth, u16 idx)
{
	struct rnic_eth_desc *d = &eth->rx_ring[idx & rnic_eth_rx_mask()];

	d->addr = eth->rx_buf[idx & rnic_eth_rx_mask()].dma;
	d->len = eth->rx_buf_len;
	d->csum_offset = 0;
	d->csum_start = 0;
	d->mss = 0;
	WRITE_ONCE(d->flags, 0);
}

/**
 * rnic_eth_rings_alloc() - the two rings and a mapped buffer for every receive entry
 * @eth: the netdev's state, stopped; rx_buf_len set from the MTU
 *
 * Indices start at 0 (as the device's do when a ring is enabled); every receive entry is
 * posted (rx_pi = ring size), nothing is queued for transmit.
 *
 * Return: 0 or -ENOMEM with nothing left allocated.
 */
int rnic_eth_rings_alloc(struct rnic_eth *eth)
{
	u32 tx_n = rnic_eth_ring_size(RNIC_ETH_TX_LOG2), rx_n = rnic_eth_ring_size(RNIC_ETH_RX_LOG2);
	u32 i;

	eth->tx_pi = eth->tx_clean = 0;
	eth->rx_ci = 0;
	eth->tx_buf = kcalloc(tx_n, sizeof(*eth->tx_buf), GFP_KERNEL);
	eth->rx_buf = kcalloc(rx_n, sizeof(*eth->rx_buf), GFP_KERNEL);
	eth->tx_ring = dma_alloc_coherent(eth->dmadev, tx_n * sizeof(*eth->tx_ring),
					  &eth->tx_ring_dma, GFP_KERNEL);
	eth->rx_ring = dma_alloc_coherent(eth->dmadev, rx_n * sizeof(*eth->rx_ring),
					  &eth->rx_ring_dma, GFP_KERNEL);
	if (!eth->tx_buf || !eth->rx_buf || !eth->tx_ring || !eth->rx_ring)
		goto err;
	for (i = 0; i < rx_n; i++) {
		if (rnic_eth_rx_buf_new(eth, &eth->rx_buf[i], false))
			goto err;
		rnic_eth_rx_post(eth, i);
	}
	eth->rx_pi = rx_n;
	return 0;

err:
	rnic_eth_rings_free(eth);
	return -ENOMEM;
}

/* Frees what rnic_eth_rings_alloc() made; the device has stopped both rings. */
void rnic_eth_rings_free(struct rnic_eth *eth)
{
	u32 tx_n = rnic_eth_ring_size(RNIC_ETH_TX_LOG2), rx_n = rnic_eth_ring_size(RNIC_ETH_RX_LOG2);
	u32 i;

	if (eth->tx_buf) {
		for (i = 0; i < tx_n; i++) {
			struct rnic_eth_tx_buf *b = &eth->tx_buf[i];

			if (!b->len)
				continue;
			rnic_eth_tx_unmap(eth, b);
			if (b->skb)
				dev_kfree_skb_any(b->skb);
		}
	}
	if (eth->rx_buf) {
		for (i = 0; i < rx_n; i++) {
			struct rnic_eth_rx_buf *b = &eth->rx_buf[i];

			if (!b->skb)
				continue;
			dma_unmap_single(eth->dmadev, b->dma, eth->rx_buf_len, DMA_FROM_DEVICE);
			dev_kfree_skb_any(b->skb);
		}
	}
	if (eth->tx_ring)
		dma_free_coherent(eth->dmadev, tx_n * sizeof(*eth->tx_ring), eth->tx_ring,
				  eth->tx_ring_dma);
	if (eth->rx_ring)
		dma_free_coherent(eth->dmadev, rx_n * sizeof(*eth->rx_ring), eth->rx_ring,
				  eth->rx_ring_dma);
	kfree(eth->tx_buf);
	kfree(eth->rx_buf);
	eth->tx_buf = NULL;
	eth->rx_buf = NULL;
	eth->tx_ring = NULL;
	eth->rx_ring = NULL;
}

/*
 * From the link poll (process context, rings up): schedules the NAPI poll when the head
 * entry of either ring is done, i.e. its interrupt was lost or is late. A read-only look;
 * the NAPI poll itself decides.
 */
bool rnic_eth_kick_stalled(struct rnic_eth *eth)
{
	u16 tx = READ_ONCE(eth->tx_clean), rx = READ_ONCE(eth->rx_ci);
	bool done;

	done = READ_ONCE(eth->rx_ring[rx & rnic_eth_rx_mask()].flags) & RNIC_ETH_DESC_DONE;
	if (tx != READ_ONCE(eth->tx_pi))
		done |= READ_ONCE(eth->tx_ring[tx & rnic_eth_tx_mask()].flags) &
			RNIC_ETH_DESC_DONE;
	if (!done)
		return false;
	local_bh_disable();
	done = napi_schedule(&eth->napi);	/* false: it is scheduled already */
	local_bh_enable();
	return done;
}

/* Asks for the next interrupt, telling the device how far the driver has processed. */
void rnic_eth_arm(struct rnic_eth *eth)
{
	u32 val = (u32)eth->rx_ci << 16 | eth->tx_clean;

	atomic_set(&eth->armed, 1);
	iowrite32(val, eth->bar0 + ETH_ARM);
}

/* A frame not sent (the caller holds the queue's lock). */
void rnic_eth_count_drop(struct rnic_eth *eth)
{
	u64_stats_update_begin(&eth->xstats.syncp);
	eth->xstats.tx_dropped++;
	u64_stats_update_end(&eth->xstats.syncp);
}

static void rnic_eth_xmit_drop(struct rnic_eth *eth, struct sk_buff *skb)
{
	if (skb)
		dev_kfree_skb_any(skb);
	rnic_eth_count_drop(eth);
}

/*
 * ndo_features_check: what the device segments is an IPv4 or IPv6 TCP packet right after
 * a 14-byte Ethernet header, its TCP header where the checksum starts, no IPv6 extension
 * headers; anything else is segmented by the stack. A checksum the descriptor cannot
 * carry (csum_offset beyond 255) is computed by the stack.
 */
netdev_features_t rnic_eth_features_check(struct sk_buff *skb, struct net_device *ndev,
					  netdev_features_t features)
{
	if (skb->ip_summed == CHECKSUM_PARTIAL && skb->csum_offset > U8_MAX)
		features &= ~(NETIF_F_CSUM_MASK | NETIF_F_GSO_MASK);
	if (!skb_is_gso(skb))
		return features;
	if (skb->encapsulation || skb_network_offset(skb) != ETH_HLEN ||
	    skb->ip_summed != CHECKSUM_PARTIAL ||
	    skb_checksum_start_offset(skb) != skb_transport_offset(skb))
		return features & ~NETIF_F_GSO_MASK;
	if ((skb_shinfo(skb)->gso_type & SKB_GSO_TCPV6) &&
	    (ipv6_hdr(skb)->nexthdr != IPPROTO_TCP ||
	     skb_transport_offset(skb) != ETH_HLEN + sizeof(struct ipv6hdr)))
		return features & ~NETIF_F_GSO_MASK;
	return features;
}

/* Maps piece @i of @skb (0: the head, else fragment i - 1) into slot @b. */
static int rnic_eth_tx_map(struct rnic_eth *eth, struct sk_buff *skb, unsigned int i,
			   struct rnic_eth_tx_buf *b)
{
	const skb_frag_t *frag;
	u32 len;

	if (!i) {
		len = skb_headlen(skb);
		b->page = false;
		b->dma = dma_map_single(eth->dmadev, skb->data, len, DMA_TO_DEVICE);
	} else {
		frag = &skb_shinfo(skb)->frags[i - 1];
		len = skb_frag_size(frag);
		b->page = true;
		b->dma = skb_frag_dma_map(eth->dmadev, frag, 0, len, DMA_TO_DEVICE);
	}
	if (dma_mapping_error(eth->dmadev, b->dma))
		return -ENOMEM;
	b->len = len;
	return 0;
}

/*
 * A frame as descriptors pi, pi + 1, ...: the head (when it holds bytes) and each page
 * fragment, TX_MORE on all but the last; the first carries the checksum and TSO request.
 * Return: the descriptors used, or 0 (nothing left mapped) when a piece cannot be mapped.
 */
static u32 rnic_eth_tx_fill(struct rnic_eth *eth, struct sk_buff *skb, u16 pi)
{
	u32 i, n = 0, pieces = 1 + skb_shinfo(skb)->nr_frags;
	struct rnic_eth_tx_buf *b = NULL;
	struct rnic_eth_desc *d = NULL;
	u8 req = 0;

	if (skb->ip_summed == CHECKSUM_PARTIAL)
		req |= RNIC_ETH_TX_CSUM;
	if (skb_is_gso(skb))
		req |= RNIC_ETH_TX_TSO;
	for (i = 0; i < pieces; i++) {
		if (!(i ? skb_frag_size(&skb_shinfo(skb)->frags[i - 1]) : skb_headlen(skb)))
			continue;	/* no bytes: no descriptor */
		b = &eth->tx_buf[(u16)(pi + n) & rnic_eth_tx_mask()];
		if (rnic_eth_tx_map(eth, skb, i, b))
			goto err;
		b->skb = NULL;
		d = &eth->tx_ring[(u16)(pi + n) & rnic_eth_tx_mask()];
		d->addr = b->dma;
		d->len = b->len;
		d->csum_offset = 0;
		d->csum_start = 0;
		d->mss = 0;
		if (!n && req) {
			d->csum_start = skb_checksum_start_offset(skb);
			d->csum_offset = skb->csum_offset;
			if (req & RNIC_ETH_TX_TSO)
				d->mss = skb_shinfo(skb)->gso_size;
		}
		WRITE_ONCE(d->flags, (n ? 0 : req) | RNIC_ETH_TX_MORE);
		n++;
	}
	if (!n)
		return 0;
	WRITE_ONCE(d->flags, d->flags & ~RNIC_ETH_TX_MORE);
	b->skb = skb;
	b->bytes = skb->len;
	return n;

err:
	while (n--)
		rnic_eth_tx_unmap(eth, &eth->tx_buf[(u16)(pi + n) & rnic_eth_tx_mask()]);
	return 0;
}

/* A frame fit for the device's descriptors, or false (the caller drops it). */
static bool rnic_eth_tx_prepare(struct rnic_eth *eth, struct sk_buff *skb)
{
	u32 i, mtu = READ_ONCE(eth->ndev->mtu);

	if (!eth->has_offload)
		return skb->len <= mtu + ETH_HLEN && !skb_linearize(skb);
	if (!skb_is_gso(skb) && skb->len > mtu + ETH_HLEN)
		return false;
	if (1 + skb_shinfo(skb)->nr_frags > RNIC_ETH_TX_DESCS_MAX) {
		if (skb_linearize(skb))
			return false;
		u64_stats_update_begin(&eth->xstats.syncp);
		eth->xstats.tx_linearized++;
		u64_stats_update_end(&eth->xstats.syncp);
	}
	if (skb_headlen(skb) > U16_MAX)
		return false;
	for (i = 0; i < skb_shinfo(skb)->nr_frags; i++)
		if (skb_frag_size(&skb_shinfo(skb)->frags[i]) > U16_MAX)
			return false;
	if (skb->ip_summed == CHECKSUM_PARTIAL && !skb_is_gso(skb) &&
	    skb_checksum_start_offset(skb) > U16_MAX) {
		u64_stats_update_begin(&eth->xstats.syncp);
		eth->xstats.tx_csum_help++;
		u64_stats_update_end(&eth->xstats.syncp);
		return !skb_checksum_help(skb);
	}
	return true;
}

netdev_tx_t rnic_eth_xmit(struct sk_buff *skb, struct net_device *ndev)
{
	struct rnic_eth *eth = netdev_priv(ndev);
	bool ring, stopped = false;
	u16 pi = eth->tx_pi;
	u32 len, n;

	/* On failure skb_put_padto() has freed the frame. */
	if (skb_put_padto(skb, ETH_ZLEN)) {
		rnic_eth_xmit_drop(eth, NULL);
		return NETDEV_TX_OK;
	}
	if (!rnic_eth_tx_prepare(eth, skb)) {
		rnic_eth_xmit_drop(eth, skb);
		return NETDEV_TX_OK;
	}
	if (unlikely(rnic_eth_tx_free(eth) < 1 + skb_shinfo(skb)->nr_frags)) {
		/* Not reached: the queue stops while a frame might not fit. */
		netif_stop_queue(ndev);
		return NETDEV_TX_BUSY;
	}
	len = skb->len;
	n = rnic_eth_tx_fill(eth, skb, pi);
	if (!n) {
		rnic_eth_xmit_drop(eth, skb);
		return NETDEV_TX_OK;
	}
	skb_tx_timestamp(skb);
	/*
	 * The socket's memory is given back now, not when the device is done (as virtio-net
	 * does without its transmit NAPI): a completion goes through the device's event loop,
	 * the MSI-X vector and the NAPI poll, milliseconds on a busy host, and with TCP small
	 * queues (about two TSO frames per socket queued) that round trip, not the link,
	 * paced a stream. BQL still bounds the bytes queued to the device.
	 */
	skb_orphan(skb);
	/*
	 * BQL accounting before the entries are published: once tx_pi moves, NAPI may complete
	 * them (a device may mark them done before the doorbell), and completing more than was
	 * queued is a BUG in the dql code. The skb is not touched after publication.
	 */
	ring = __netdev_sent_queue(ndev, len, netdev_xmit_more());
	smp_store_release(&eth->tx_pi, (u16)(pi + n));

	if (rnic_eth_tx_free(eth) < RNIC_ETH_TX_DESCS_MAX) {
		netif_stop_queue(ndev);
		stopped = true;
		/* Pairs with the barrier after NAPI moves tx_clean: either sees the other. */
		smp_mb();
		if (rnic_eth_tx_free(eth) >= RNIC_ETH_TX_WAKE)
			netif_start_queue(ndev);
	}
	if (ring || stopped) {
		dma_wmb();	/* the descriptors before the doorbell */
		iowrite32((u16)(pi + n), eth->bar0 + ETH_TXQ_PI);
	}
	if (stopped) {
		u64_stats_update_begin(&eth->xstats.syncp);
		eth->xstats.tx_stops++;
		u64_stats_update_end(&eth->xstats.syncp);
	}
	return NETDEV_TX_OK;
}

/* Frees the frames of the done transmit descriptors, in ring order, and wakes the queue. */
static void rnic_eth_tx_reclaim(struct rnic_eth *eth, int budget)
{
	struct net_device *ndev = eth->ndev;
	u16 clean = eth->tx_clean, pi = smp_load_acquire(&eth->tx_pi);
	unsigned int pkts = 0, bytes = 0, errs = 0, done = 0, done_bytes = 0;
	bool woken = false;

	while (clean != pi) {
		struct rnic_eth_desc *d = &eth->tx_ring[clean & rnic_eth_tx_mask()];
		struct rnic_eth_tx_buf *b = &eth->tx_buf[clean & rnic_eth_tx_mask()];
		u8 flags = READ_ONCE(d->flags);

		if (!(flags & RNIC_ETH_DESC_DONE))
			break;
		if (b->len)
			rnic_eth_tx_unmap(eth, b);
		clean++;
		if (!b->skb)
			continue;	/* not the frame's last piece */
		if (flags & RNIC_ETH_DESC_ERR) {
			errs++;
		} else {
			pkts += skb_is_gso(b->skb) ? skb_shinfo(b->skb)->gso_segs : 1;
			bytes += b->bytes;
		}
		done++;
		done_bytes += b->bytes;
		napi_consume_skb(b->skb, budget);
		b->skb = NULL;
	}
	if (!done)
		return;
	netdev_completed_queue(ndev, done, done_bytes);
	smp_store_release(&eth->tx_clean, clean);
	/* Pairs with the barrier in rnic_eth_xmit() after it stopped the queue. */
	smp_mb();
	if (netif_queue_stopped(ndev) && rnic_eth_tx_free(eth) >= RNIC_ETH_TX_WAKE) {
		netif_wake_queue(ndev);
		woken = true;
	}
	u64_stats_update_begin(&eth->nstats.syncp);
	eth->nstats.tx_packets += pkts;
	eth->nstats.tx_bytes += bytes;
	eth->nstats.tx_desc_errors += errs;
	eth->nstats.tx_wakes += woken;
	u64_stats_update_end(&eth->nstats.syncp);
}

/* Hands up to @budget received frames to GRO and posts their entries again. */
static int rnic_eth_rx(struct rnic_eth *eth, int budget)
{
	struct net_device *ndev = eth->ndev;
	unsigned int pkts = 0, bytes = 0, bad = 0, errs = 0, nomem = 0;
	u16 ci = eth->rx_ci;
	int done = 0;

	while (done < budget && ci != eth->rx_pi) {
		struct rnic_eth_desc *d = &eth->rx_ring[ci & rnic_eth_rx_mask()];
		struct rnic_eth_rx_buf *b = &eth->rx_buf[ci & rnic_eth_rx_mask()];
		struct rnic_eth_rx_buf nb;
		struct sk_buff *skb;
		u8 flags = READ_ONCE(d->flags);
		u32 len;

		if (!(flags & RNIC_ETH_DESC_DONE))
			break;
		dma_rmb();	/* flags before len and the frame */
		len = READ_ONCE(d->len);
		done++;
		if (unlikely(flags & RNIC_ETH_DESC_ERR)) {
			errs++;
		} else if (unlikely(len < ETH_HLEN || len > eth->rx_buf_len)) {
			bad++;
			if (net_ratelimit())
				netdev_warn(ndev, "receive entry %u: length %u outside 14..%u, dropped\n",
					    ci, len, eth->rx_buf_len);
		} else if (unlikely(rnic_eth_rx_buf_new(eth, &nb, true))) {
			nomem++;
		} else {
			skb = b->skb;
			dma_unmap_single(eth->dmadev, b->dma, eth->rx_buf_len, DMA_FROM_DEVICE);
			*b = nb;
			skb_put(skb, len);
			skb->protocol = eth_type_trans(skb, ndev);
			if ((flags & RNIC_ETH_DESC_CSUM_OK) && (ndev->features & NETIF_F_RXCSUM))
				skb->ip_summed = CHECKSUM_UNNECESSARY;
			napi_gro_receive(&eth->napi, skb);
			pkts++;
			bytes += len;
		}
		/* Entry ci's slot again, as entry ci + ring size (its buffer new or reused). */
		rnic_eth_rx_post(eth, ci);
		ci++;
	}
	if (!done)
		return 0;
	eth->rx_ci = ci;
	eth->rx_pi = ci + rnic_eth_ring_size(RNIC_ETH_RX_LOG2);
	dma_wmb();	/* the descriptors before the doorbell */
	iowrite32(eth->rx_pi, eth->bar0 + ETH_RXQ_PI);

	u64_stats_update_begin(&eth->nstats.syncp);
	eth->nstats.rx_packets += pkts;
	eth->nstats.rx_bytes += bytes;
	eth->nstats.rx_bad_desc += bad;
	eth->nstats.rx_desc_errors += errs;
	eth->nstats.rx_alloc_failures += nomem;
	u64_stats_update_end(&eth->nstats.syncp);
	return done;
}

int rnic_eth_poll(struct napi_struct *napi, int budget)
{
	struct rnic_eth *eth = container_of(napi, struct rnic_eth, napi);
	int done = 0;

	rnic_eth_tx_reclaim(eth, budget);
	u64_stats_update_begin(&eth->nstats.syncp);
	eth->nstats.polls++;
	u64_stats_update_end(&eth->nstats.syncp);
	if (!budget)
		return 0;	/* netpoll: transmit completions only, stay scheduled */
	done = rnic_eth_rx(eth, budget);
	if (done < budget && napi_complete_done(napi, done))
		rnic_eth_arm(eth);
	return done;
}

/**
 * rnic_netdev_irq() - the netdev's part of an MSI-X vector (hard-irq context)
 * @nic: the RNIC
 * @vec: the vector that fired
 *
 * Return: whether the netdev was waiting for this interrupt (armed on @vec); its NAPI
 * poll is then scheduled.
 */
bool rnic_netdev_irq(struct rnic_nic *nic, unsigned int vec)
{
	struct rnic_eth *eth = READ_ONCE(nic->eth);

	if (!eth || eth->vector != vec || !atomic_xchg(&eth->armed, 0))
		return false;
	napi_schedule_irqoff(&eth->napi);
	return true;
}
