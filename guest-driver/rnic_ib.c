// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: registration with the kernel's RDMA core (docs/ibverbs.md).
 *
 * What it models: an RDMA device "rnicN" (node type CA, one port, link layer Ethernet,
 * RoCEv2 only) whose attributes are the RNIC's limits (BAR0, docs/verbs.md §1.1), whose
 * GID table ib_core fills from the netdev "rethN" (rnic_netdev.c: the RNIC's fabric
 * address ::ffff:a.b.c.d), whose port state follows that netdev's carrier, and user
 * contexts for libibverbs: each is a verbs context of the driver's own (rnic_uc_open(), as
 * an open /dev/rnic_emuN), so PDs here and CQs, QPs and MRs in rnic_ib_verbs.c run the
 * character device's code on it.
 *
 * What it does not: kernel consumers (no kernel PDs, CQs, QPs), MADs, UD, SRQs,
 * more than one P_Key (0xffff); docs/ibverbs.md lists what works.
 */
#include <linux/pci.h>
#include <net/addrconf.h>
#include <rdma/ib_addr.h>
#include <rdma/ib_mad.h>
#include <rdma/uverbs_ioctl.h>

#include "rnic_ib.h"
#include "uapi/rnic_ib_abi.h"

#define RNIC_IB_GID_TABLE_LEN	RNIC_GID_TABLE_LEN	/* the device's table (contract 1.8) */

static int rnic_ib_query_device(struct ib_device *ibdev, struct ib_device_attr *attr,
				struct ib_udata *udata)
{
	struct rnic_nic *nic = to_rnic_ibdev(ibdev)->nic;
	u32 ring = 1U << nic->max_ring_log2;

	if (udata && (udata->inlen || udata->outlen))
		return -EINVAL;
	memset(attr, 0, sizeof(*attr));
	attr->fw_ver = nic->rd.version;
	attr->sys_image_guid = ibdev->node_guid;
	attr->max_mr_size = RNIC_UAPI_MAX_MR_SIZE;
	attr->page_size_cap = PAGE_SIZE;
	attr->vendor_id = nic->rd.pdev->vendor;
	attr->vendor_part_id = nic->rd.pdev->device;
	attr->hw_ver = nic->rd.version;
	attr->max_qp = nic->max_qp - RNIC_FIRST_QPN;
	attr->max_qp_wr = ring;
	attr->max_send_sge = RNIC_UAPI_MAX_SGE;
	attr->max_recv_sge = RNIC_UAPI_MAX_SGE;
	attr->max_sge_rd = RNIC_UAPI_MAX_SGE;
	attr->max_cq = nic->max_cq;
	attr->max_cqe = ring;
	attr->max_mr = nic->max_mr;
	attr->max_pd = RNIC_MAX_PD - 1;
	/*
	 * READs and atomics outstanding per QP, either side (minor 12 enforces the QP's own
	 * limits; the engine kept 16 before). The engine runs the atomics of all its QPs one
	 * after another: atomic with respect to each other, not to the CPUs (IB_ATOMIC_HCA).
	 */
	attr->max_qp_rd_atom = 16;
	attr->max_qp_init_rd_atom = 16;
	attr->max_res_rd_atom = 16 * nic->max_qp;
	attr->atomic_cap = rnic_nic_atomics(nic) ? IB_ATOMIC_HCA : IB_ATOMIC_NONE;
	/*
	 * IBTA 1.5 FLUSH to global visibility and ATOMIC WRITE (minor 14). Not FLUSH to
	 * persistence: guest RAM is no persistent memory, so ib_core refuses MRs that ask for
	 * it and a FLUSH naming it draws a remote access error.
	 */
	if (rnic_nic_flush(nic))
		attr->device_cap_flags |= IB_DEVICE_FLUSH_GLOBAL | IB_DEVICE_ATOMIC_WRITE;
	/* SRQs (minor 15) take their numbers from the QPs'; no resizing. */
	if (rnic_nic_srq(nic)) {
		attr->max_srq = attr->max_qp;
		attr->max_srq_wr = ring;
		attr->max_srq_sge = RNIC_UAPI_MAX_SGE;
	}
	/* UD (minor 16): an AH is a vector in the WQEs, so any number of them; no multicast. */
	if (rnic_nic_ud(nic))
		attr->max_ah = INT_MAX;
	attr->max_pkeys = 1;
	attr->local_ca_ack_delay = 15;
	return 0;
}

/*
 * The port is active while its netdev is up with carrier, as on any RoCE NIC. A node
 * without a fabric has no link to carry; its QPs talk to QPs of the same RNIC only, and
 * its port is active while the netdev is up.
 */
static bool rnic_ib_port_up(struct rnic_ibdev *rib)
{
	return netif_running(rib->ndev) && (netif_carrier_ok(rib->ndev) || rib->loopback_only);
}

static int rnic_ib_query_port(struct ib_device *ibdev, u32 port, struct ib_port_attr *attr)
{
	struct rnic_ibdev *rib = to_rnic_ibdev(ibdev);
	bool up = rnic_ib_port_up(rib);

	/* ib_core zeroed *attr and checked the port number. */
	attr->state = up ? IB_PORT_ACTIVE : IB_PORT_DOWN;
	attr->phys_state = up ? IB_PORT_PHYS_STATE_LINK_UP : IB_PORT_PHYS_STATE_DISABLED;
	attr->max_mtu = IB_MTU_4096;
	/* What fits the netdev's MTU (the device caps each fabric QP's path MTU alike). */
	attr->active_mtu = iboe_get_mtu(READ_ONCE(rib->ndev->mtu));
	attr->gid_tbl_len = RNIC_IB_GID_TABLE_LEN;
	attr->ip_gids = true;
	attr->max_msg_sz = RNIC_UAPI_MAX_MR_SIZE;
	attr->pkey_tbl_len = 1;
	attr->max_vl_num = 1;
	attr->active_width = IB_WIDTH_1X;
	attr->active_speed = IB_SPEED_SDR;
	return 0;
}

static int rnic_ib_get_port_immutable(struct ib_device *ibdev, u32 port,
				      struct ib_port_immutable *immutable)
{
	immutable->pkey_tbl_len = 1;
	immutable->gid_tbl_len = RNIC_IB_GID_TABLE_LEN;
	/* RoCEv2 only: no MADs (so no kernel MAD agents, which would need kernel QPs). */
	immutable->core_cap_flags = RDMA_CORE_CAP_PROT_ROCE_UDP_ENCAP;
	return 0;
}

static enum rdma_link_layer rnic_ib_get_link_layer(struct ib_device *ibdev, u32 port)
{
	return IB_LINK_LAYER_ETHERNET;
}

static int rnic_ib_query_pkey(struct ib_device *ibdev, u32 port, u16 index, u16 *pkey)
{
	if (index)
		return -EINVAL;
	*pkey = IB_DEFAULT_PKEY_FULL;
	return 0;
}

static int rnic_ib_alloc_ucontext(struct ib_ucontext *ibuc, struct ib_udata *udata)
{
	struct rnic_ib_ucontext *ctx = container_of(ibuc, struct rnic_ib_ucontext, ibuc);
	struct rnic_nic *nic = to_rnic_ibdev(ibuc->device)->nic;
	struct rnic_ib_alloc_ucontext_resp resp = {
		.max_qp = nic->max_qp,
		.max_inline = RNIC_UAPI_MAX_INLINE,
	};
	int ret;

	if (!rnic_ib_udata_in_ok(ibuc->device, udata, "alloc_ucontext"))
		return -EINVAL;
	ctx->uc = rnic_uc_open(nic);
	if (IS_ERR(ctx->uc))
		return PTR_ERR(ctx->uc);
	ret = ib_respond_udata(udata, resp);
	if (ret)
		rnic_uc_close(ctx->uc);
	return ret;
}

static void rnic_ib_dealloc_ucontext(struct ib_ucontext *ibuc)
{
	rnic_uc_close(rnic_ib_uc(ibuc));
}

/* Removal with contexts still open: ib_core zaps their mappings; nothing else is ours. */
static void rnic_ib_disassociate_ucontext(struct ib_ucontext *ibuc)
{
}

static int rnic_ib_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct rnic_ib_pd *pd = container_of(ibpd, struct rnic_ib_pd, ibpd);
	struct rnic_alloc_pd req = {};
	struct rnic_ucontext *uc;
	int ret;

	if (!udata)
		return -EOPNOTSUPP;	/* kernel consumers are not offered */
	if (!rnic_ib_udata_in_ok(ibpd->device, udata, "alloc_pd"))
		return -EINVAL;
	uc = rdma_udata_to_drv_context(udata, struct rnic_ib_ucontext, ibuc)->uc;
	ret = rnic_uc_lock(uc);
	if (ret)
		return ret;
	ret = rnic_alloc_pd(uc, &req);
	rnic_uc_unlock(uc);
	pd->uc = uc;
	pd->pdn = req.pd;
	return ret;
}

static int rnic_ib_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct rnic_ib_pd *pd = container_of(ibpd, struct rnic_ib_pd, ibpd);
	struct rnic_ucontext *uc = pd->uc;
	struct rnic_pd *rpd;

	mutex_lock(&uc->lock);
	rpd = uc->dead ? NULL : xa_load(&uc->pds, pd->pdn);
	if (rpd)
		rnic_pd_free(uc, rpd);	/* ib_core destroyed its QPs and MRs first */
	mutex_unlock(&uc->lock);
	return 0;
}

static const struct ib_device_ops rnic_ib_ops = {
	.owner			= THIS_MODULE,
	.driver_id		= RDMA_DRIVER_UNKNOWN,
	.uverbs_abi_ver		= RNIC_IB_ABI_VERSION,

	.query_device		= rnic_ib_query_device,
	.query_port		= rnic_ib_query_port,
	.get_port_immutable	= rnic_ib_get_port_immutable,
	.get_link_layer		= rnic_ib_get_link_layer,
	.query_pkey		= rnic_ib_query_pkey,
	.add_gid		= rnic_ib_add_gid,
	.del_gid		= rnic_ib_del_gid,
	.alloc_ucontext		= rnic_ib_alloc_ucontext,
	.dealloc_ucontext	= rnic_ib_dealloc_ucontext,
	.disassociate_ucontext	= rnic_ib_disassociate_ucontext,
	.mmap			= rnic_ib_mmap,
	.mmap_free		= rnic_ib_mmap_free,
	.alloc_pd		= rnic_ib_alloc_pd,
	.dealloc_pd		= rnic_ib_dealloc_pd,
	.create_cq		= rnic_ib_create_cq,
	.create_user_cq		= rnic_ib_create_cq,
	.destroy_cq		= rnic_ib_destroy_cq,
	.req_notify_cq		= rnic_ib_req_notify_cq,
	.create_qp		= rnic_ib_create_qp,
	.modify_qp		= rnic_ib_modify_qp,
	.query_qp		= rnic_ib_query_qp,
	.destroy_qp		= rnic_ib_destroy_qp,
	.post_send		= rnic_ib_post_send,
	.post_recv		= rnic_ib_post_recv,
	.reg_user_mr		= rnic_ib_reg_user_mr,
	.reg_user_mr_dmabuf	= rnic_ib_reg_user_mr_dmabuf,
	.rereg_user_mr		= rnic_ib_rereg_user_mr,
	.dereg_mr		= rnic_ib_dereg_mr,
	.create_srq		= rnic_ib_create_srq,
	.modify_srq		= rnic_ib_modify_srq,
	.query_srq		= rnic_ib_query_srq,
	.destroy_srq		= rnic_ib_destroy_srq,
	.post_srq_recv		= rnic_ib_post_srq_recv,
	.create_ah		= rnic_ib_create_ah,
	.create_user_ah		= rnic_ib_create_ah,
	.query_ah		= rnic_ib_query_ah,
	.destroy_ah		= rnic_ib_destroy_ah,

	INIT_RDMA_OBJ_SIZE(ib_ucontext, rnic_ib_ucontext, ibuc),
	INIT_RDMA_OBJ_SIZE(ib_pd, rnic_ib_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_cq, rnic_ib_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_qp, rnic_ib_qp, ibqp),
	INIT_RDMA_OBJ_SIZE(ib_srq, rnic_ib_srq, ibsrq),
	INIT_RDMA_OBJ_SIZE(ib_ah, rnic_ib_ah, ibah),
};

int rnic_ib_register(struct rnic_nic *nic)
{
	struct pci_dev *pdev = nic->rd.pdev;
	struct rnic_ibdev *rib;
	int ret;

	rib = ib_alloc_device(rnic_ibdev, ibdev);
	if (!rib)
		return -ENOMEM;
	rib->nic = nic;
	rib->loopback_only = ioread32(nic->rd.bar0 + RNIC_REG_IPV4) == 0;

	rib->ndev = rnic_netdev_create(nic);
	if (IS_ERR(rib->ndev)) {
		ret = PTR_ERR(rib->ndev);
		goto err_dealloc;
	}

	rib->ibdev.node_type = RDMA_NODE_IB_CA;
	rib->ibdev.phys_port_cnt = 1;
	rib->ibdev.num_comp_vectors = max_t(int, 1, (int)nic->rd.nvec - 1);
	rib->ibdev.dev.parent = &pdev->dev;
	/* The node GUID from the netdev's MAC as probed (ETH_PERM_MAC), as RoCE NICs do. */
	addrconf_addr_eui48((u8 *)&rib->ibdev.node_guid, rib->ndev->dev_addr);
	strscpy(rib->ibdev.node_desc, "rnic-emu RNIC", sizeof(rib->ibdev.node_desc));
	ib_set_device_ops(&rib->ibdev, &rnic_ib_ops);
	/*
	 * The write() commands libibverbs' kernel-bypass providers use beyond the default set:
	 * the doorbell on request (POST_SEND/POST_RECV/POST_SRQ_RECV with no work requests)
	 * and CQ arming.
	 */
	rib->ibdev.uverbs_cmd_mask |= BIT_ULL(IB_USER_VERBS_CMD_POST_SEND) |
				      BIT_ULL(IB_USER_VERBS_CMD_POST_RECV) |
				      BIT_ULL(IB_USER_VERBS_CMD_POST_SRQ_RECV) |
				      BIT_ULL(IB_USER_VERBS_CMD_REQ_NOTIFY_CQ);

	ret = ib_device_set_netdev(&rib->ibdev, rib->ndev, 1);
	if (ret)
		goto err_netdev;
	ret = ib_register_device(&rib->ibdev, "rnic%d", &pdev->dev);
	if (ret)
		goto err_netdev;
	nic->ib = rib;
	dev_info(&pdev->dev, "RDMA device %s, netdev %s\n", dev_name(&rib->ibdev.dev),
		 rib->ndev->name);
	return 0;

err_netdev:
	ib_device_set_netdev(&rib->ibdev, NULL, 1);
	rnic_netdev_destroy(rib->ndev);
err_dealloc:
	ib_dealloc_device(&rib->ibdev);
	return ret;
}

void rnic_ib_unregister(struct rnic_nic *nic)
{
	struct rnic_ibdev *rib = nic->ib;

	if (!rib)
		return;
	flush_work(&nic->event_work);	/* a DEVICE_FATAL already noticed goes out first */
	WRITE_ONCE(nic->ib, NULL);
	flush_work(&nic->event_work);	/* and no event work still uses the device */
	ib_unregister_device(&rib->ibdev);
	rnic_netdev_destroy(rib->ndev);
	ib_dealloc_device(&rib->ibdev);
}
