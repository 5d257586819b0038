/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rnic-emu guest driver: the RNIC as an RDMA device of the kernel's RDMA core (ib_core),
 * so libibverbs and the tools built on it (ibv_devinfo, perftest, ...) see it; see
 * docs/ibverbs.md. One device "rnicN" per RNIC, one RoCEv2 port whose GIDs come from the
 * RNIC's netdev (rnic_netdev.c, an Ethernet NIC on the device's Ethernet port) and whose
 * state follows that netdev's carrier.
 *
 * The verbs objects are the driver's own (rnic_pd.c, ...): the ib_core callbacks here are a
 * thin layer that wraps them in the structures ib_core allocates.
 */
#ifndef _RNIC_IB_H
#define _RNIC_IB_H

#include <linux/if_ether.h>
#include <linux/netdevice.h>
#include <linux/unaligned.h>
#include <rdma/ib_verbs.h>

#include "rnic_verbs.h"

struct rnic_ibdev {
	struct ib_device ibdev;		/* first: ib_alloc_device() */
	struct rnic_nic *nic;
	struct net_device *ndev;	/* the port's netdev (RoCE GIDs) */
	bool loopback_only;		/* no fabric (RNIC_REG_IPV4 0): QPs of this RNIC only */
};

/* A libibverbs context: a verbs context of the driver's own (rnic_uc_open()). */
struct rnic_ib_ucontext {
	struct ib_ucontext ibuc;
	struct rnic_ucontext *uc;
};

struct rnic_ib_pd {
	struct ib_pd ibpd;
	struct rnic_ucontext *uc;	/* its context's */
	u32 pdn;			/* in uc->pds */
};

/* An mmap entry: a ring (has_ring) or one page of the doorbell page (rnic_ib_mmap.c). */
struct rnic_ib_mmap {
	struct rdma_user_mmap_entry rdma;
	struct rnic_nic *nic;		/* a reference */
	unsigned long pfn;
	bool has_ring;			/* else a doorbell-page page, holding its number */
	enum rnic_num_kind num_kind;	/* the doorbell-page page's object (rnic_num.c) */
	u32 num;
	struct rnic_ring_map ring;
};

struct rnic_ib_cq {
	struct ib_cq ibcq;
	struct rnic_ucontext *uc;	/* its context's */
	u32 cqn;			/* in uc->cqs */
	u32 vector;
	atomic_t armed;			/* req_notify_cq asked for the next completion */
	struct rnic_ib_mmap *ring_map, *db_map;
};

struct rnic_ib_qp {
	struct ib_qp ibqp;
	struct rnic_ucontext *uc;	/* its context's */
	u32 qpn;			/* in uc->qps */
	u32 state;			/* IB_QPS_* as last set */
	u32 min_rnr_us;			/* RNR timer given at INIT->RTR, applied at RTR->RTS */
	u8 min_rnr_timer;		/* the same as IB's code, for query_qp */
	bool has_av;			/* av holds the address vector of the last IB_QP_AV */
	struct {			/* what query_qp reports of it (no GID reference kept) */
		union ib_gid dgid;
		u32 flow_label;
		u8 sgid_index, hop_limit, traffic_class, sl;
		u8 dmac[ETH_ALEN];
	} av;
	struct rnic_ib_mmap *sq_map, *rq_map, *db_map;
};

/* An SRQ (minor 15; rnic_ib_srq.c): the driver's struct rnic_srq under its QPN. */
struct rnic_ib_srq {
	struct ib_srq ibsrq;
	struct rnic_ucontext *uc;	/* its context's */
	u32 qpn;			/* in uc->srqs */
	u32 limit;			/* as armed; 0 once the device reported it reached */
	struct rnic_ib_mmap *ring_map, *db_map;
};

/* An address handle (minor 16; rnic_ib_ah.c): the vector a UD send WQE carries. */
struct rnic_ib_ah {
	struct ib_ah ibah;
	struct rnic_ud_av av;
};

struct rnic_ib_mr {
	struct ib_mr ibmr;
	struct rnic_ucontext *uc;	/* its context's */
	u32 index;			/* in uc->mrs */
};

/*
 * A MAC as the device's descriptors hold it (QP paths, UD address vectors): its six bytes in
 * wire order from bits [7:0] up, bits 63:48 zero; and back.
 */
static inline u64 rnic_ib_mac_to_dev(const u8 *mac)
{
	u8 b[8] = {};

	memcpy(b, mac, ETH_ALEN);
	return get_unaligned_le64(b);
}

static inline void rnic_ib_mac_from_dev(u64 v, u8 *mac)
{
	u8 b[8];

	put_unaligned_le64(v, b);
	memcpy(mac, b, ETH_ALEN);
}

static inline struct rnic_ucontext *rnic_ib_uc(struct ib_ucontext *ibuc)
{
	return container_of(ibuc, struct rnic_ib_ucontext, ibuc)->uc;
}

static inline struct rnic_ibdev *to_rnic_ibdev(struct ib_device *ibdev)
{
	return container_of(ibdev, struct rnic_ibdev, ibdev);
}

static inline struct rnic_nic *ib_nic(struct ib_device *ibdev)
{
	return to_rnic_ibdev(ibdev)->nic;
}

static inline u32 ib_pdn(struct ib_pd *ibpd)
{
	return container_of(ibpd, struct rnic_ib_pd, ibpd)->pdn;
}

static inline u32 rnic_ib_srqn(struct ib_srq *ibsrq)
{
	return container_of(ibsrq, struct rnic_ib_srq, ibsrq)->qpn;
}

/*
 * The driver-specific input of a verb (udata): none is defined (include/uapi/rnic_ib_abi.h
 * has responses only), so what a caller sends must be empty or all zero, which leaves room
 * to define fields later. False (with a rate-limited line) for anything else: -EINVAL.
 */
static inline bool rnic_ib_udata_in_ok(struct ib_device *ibdev, struct ib_udata *udata,
				       const char *verb)
{
	if (!udata || !udata->inlen || ib_is_udata_cleared(udata, 0, udata->inlen))
		return true;
	dev_warn_ratelimited(&ibdev->dev, "%s: %zu bytes of driver input, none defined\n", verb,
			     udata->inlen);
	return false;
}

/* rnic_ib.c */
int rnic_ib_register(struct rnic_nic *nic);
void rnic_ib_unregister(struct rnic_nic *nic);

/* rnic_ib_mmap.c */
int rnic_ib_mmap_ring(struct rnic_ib_ucontext *ctx, void *ring, size_t size, dma_addr_t dma,
		      u64 *key, struct rnic_ib_mmap **out);
int rnic_ib_mmap_db(struct rnic_ib_ucontext *ctx, enum rnic_num_kind kind, u32 num, u64 *key,
		    struct rnic_ib_mmap **out);
void rnic_ib_mmap_remove(struct rnic_ib_mmap *m);
int rnic_ib_mmap(struct ib_ucontext *ibuc, struct vm_area_struct *vma);
void rnic_ib_mmap_free(struct rdma_user_mmap_entry *e);

/* rnic_ib_verbs.c: CQs, QPs, MRs, doorbells and CQ arming for user contexts */
int rnic_ib_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		      struct uverbs_attr_bundle *attrs);
int rnic_ib_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata);
int rnic_ib_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags);
int rnic_ib_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init, struct ib_udata *udata);
/* rnic_ib_srq.c: shared receive queues (minor 15) */
int rnic_ib_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
		       struct ib_udata *udata);
int rnic_ib_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
		       enum ib_srq_attr_mask mask, struct ib_udata *udata);
int rnic_ib_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr);
int rnic_ib_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata);
int rnic_ib_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
			  const struct ib_recv_wr **bad_wr);
void rnic_ib_srq_event(struct rnic_nic *nic, u32 qpn);
/* rnic_ib_ah.c: address handles for UD QPs (minor 16) */
int rnic_ib_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init, struct ib_udata *udata);
int rnic_ib_query_ah(struct ib_ah *ibah, struct rdma_ah_attr *attr);
int rnic_ib_destroy_ah(struct ib_ah *ibah, u32 flags);
/* rnic_ib_gid.c: the port's GID table on the device */
int rnic_ib_add_gid(const struct ib_gid_attr *attr, void **context);
int rnic_ib_del_gid(const struct ib_gid_attr *attr, void **context);
bool rnic_ib_gid_is_own(struct rnic_nic *nic, const u8 *gid);

int rnic_ib_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		      struct ib_udata *udata);
int rnic_ib_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		     struct ib_qp_init_attr *init);
int rnic_ib_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata);
int rnic_ib_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		      const struct ib_send_wr **bad_wr);
int rnic_ib_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		      const struct ib_recv_wr **bad_wr);
void rnic_ib_ring_db(struct rnic_nic *nic, u32 qpn, bool recv);
struct ib_mr *rnic_ib_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length, u64 virt,
				  int access, struct ib_dmah *dmah, struct ib_udata *udata);
struct ib_mr *rnic_ib_reg_user_mr_dmabuf(struct ib_pd *ibpd, u64 offset, u64 length,
					 u64 virt_addr, int fd, int access,
					 struct ib_dmah *dmah, struct uverbs_attr_bundle *attrs);
struct ib_mr *rnic_ib_rereg_user_mr(struct ib_mr *ibmr, int flags, u64 start, u64 length,
				    u64 virt, int access, struct ib_pd *ibpd,
				    struct ib_udata *udata);
int rnic_ib_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata);

/* rnic_netdev.c: the port's netdev rethN (its rings, NAPI, ethtool: rnic_netdev.h) */
struct net_device *rnic_netdev_create(struct rnic_nic *nic);
void rnic_netdev_destroy(struct net_device *ndev);

#endif /* _RNIC_IB_H */
