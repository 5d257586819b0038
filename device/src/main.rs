//! The `rnic-emu` command: serve a node, boot a topology and run a guest command, print
//! QEMU arguments, generate the C header and register doc, print modelled hardware time
//! (`model`), a running node's WQE trace (`trace`) and its MMIO/DMA trace (`trace --mmio
//! --dma`). Arguments are checked before anything is built or started (`checks`).

mod checks;
mod iotrace_cli;
mod run_cli;
mod timing_cli;

use checks::OrConfig;
use clap::{Parser, Subcommand};
use rnic_emu::{image, qemu, run};
use rnic_emu_core::contract;
use rnic_emu_core::platform::topology::Topology;
use rnic_emu_server::serve;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

/// The default topology, embedded so that `rnic-emu run` works without arguments.
pub(crate) const DEFAULT_TOPOLOGY: &str = include_str!("../../qemu-configs/single-switch.toml");

#[derive(Parser)]
#[command(name = "rnic-emu", version, about = "Emulated RDMA NIC + GPU for QEMU (vfio-user)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// Which node of which topology, and where its sockets live.
#[derive(clap::Args)]
struct NodeArgs {
    #[arg(long)]
    topology: PathBuf,
    /// Node name or index.
    #[arg(long, default_value = "0")]
    node: String,
    /// Directory for the sockets (<node>-<device>.sock).
    #[arg(long)]
    socket_dir: PathBuf,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve one node of a topology: one vfio-user socket per PCI function.
    Serve {
        #[command(flatten)]
        at: NodeArgs,
        /// Back GPU memory with files <dir>/<node>-<gpu>.bar1 (inspectable) instead of memfds.
        #[arg(long)]
        gpu_mem_dir: Option<PathBuf>,
        /// Write every frame the node's port sends and receives to this pcap file.
        #[arg(long, value_name = "FILE")]
        pcap: Option<PathBuf>,
        /// Stop recording once the pcap file would pass this size (MiB; default 256).
        #[arg(long, value_name = "MIB", requires = "pcap")]
        pcap_max_mib: Option<u64>,
        /// The L2 segment to join: GROUP:PORT[@INTERFACE-ADDRESS], an IPv4 multicast group
        /// (default: one derived from the topology's name, on 127.0.0.1);
        /// vxlan:VNI@LOCAL-IP[:PORT],remote=IP[:PORT],... (VXLAN to remote VTEPs, UDP port
        /// 4789 by default); tap:NAME (a TAP device; CAP_NET_ADMIN). docs/fabric.md, "Backends".
        #[arg(long, value_name = "SEGMENT")]
        segment: Option<rnic_emu_server::fabric::segment::SegmentAddr>,
    },
    /// Boot a node of a topology, run a shell command in the guest as root, print its output
    /// and exit with its exit code (2: bad arguments or configuration, 125: rnic-emu itself
    /// failed, 130: interrupted; README.md, "Exit codes").
    Run(run_cli::RunArgs),
    /// Print the QEMU arguments of a topology node (for your own QEMU command line): the
    /// -device arguments of its PCIe tree and functions, and for a plain node (`nic =
    /// "virtio-net"`) the -netdev/-device pair of its NIC on the fabric segment.
    QemuArgs {
        #[command(flatten)]
        at: NodeArgs,
        /// The segment a plain node's NIC joins, as `serve --segment` takes it (default: the
        /// topology's own multicast segment). QEMU has no VXLAN backend: use a TAP there.
        #[arg(long, value_name = "SEGMENT")]
        segment: Option<rnic_emu_server::fabric::segment::SegmentAddr>,
    },
    /// Print the counters of a running node server (JSON), per function.
    Stats {
        /// The server's --socket-dir.
        #[arg(long)]
        socket_dir: PathBuf,
        /// Node name.
        #[arg(long, default_value = "node0")]
        node: String,
    },
    /// Print modelled hardware time (docs/timing.md): one work request's per-stage
    /// timeline, or a ring all_reduce's bandwidth and latency percentiles, from the
    /// topology's [timing] parameters, without booting anything.
    Model {
        /// Topology file (default: the embedded single-switch topology).
        #[arg(long)]
        topology: Option<PathBuf>,
        #[arg(long, default_value = "write")]
        op: rnic_emu_core::observe::timing::Op,
        /// Message bytes (all_reduce: bytes per node).
        #[arg(long, default_value_t = 4096)]
        size: u64,
        #[arg(long, default_value = "gpu")]
        src: rnic_emu_core::observe::timing::Mem,
        #[arg(long, default_value = "gpu")]
        dst: rnic_emu_core::observe::timing::Mem,
        /// Nodes of the collective.
        #[arg(long, default_value_t = 8)]
        nodes: u32,
        /// Model a collective instead of one request (all_reduce: ring, GPUDirect on and off).
        #[arg(long)]
        collective: Option<String>,
        /// The network (roce or ib-ndr); default: the topology's [timing] fabric.
        #[arg(long)]
        fabric: Option<rnic_emu_core::platform::topology::params::Fabric>,
        #[arg(long)]
        json: bool,
    },
    /// Print a running node's recent WQEs: measured host-time stages beside the modelled
    /// timeline of the same request.
    Trace {
        /// The server's --socket-dir.
        #[arg(long, required_unless_present = "from")]
        socket_dir: Option<PathBuf>,
        #[arg(long, default_value = "node0")]
        node: String,
        /// Only this QP.
        #[arg(long)]
        qp: Option<u32>,
        /// Keep printing new records until interrupted.
        #[arg(long)]
        follow: bool,
        /// Topology whose [timing] parameters the modelled column uses (default: defaults).
        #[arg(long)]
        topology: Option<PathBuf>,
        #[arg(long)]
        json: bool,
        /// Turn recording on or off (it is on from the start; a few clock reads per WQE).
        #[arg(long, value_name = "on|off")]
        record: Option<String>,
        /// MMIO/DMA trace (docs/trace.md): show register accesses (with --record: turn
        /// the MMIO/DMA recording on or off instead of the WQE trace's).
        #[arg(long)]
        mmio: bool,
        /// MMIO/DMA trace: show the RNIC's DMAs (WQE fetch, payload, CQE, command).
        #[arg(long)]
        dma: bool,
        /// MMIO/DMA trace: only this function kind.
        #[arg(long, value_name = "rnic|gpu", value_parser = ["rnic", "gpu"])]
        function: Option<String>,
        /// MMIO/DMA trace: only register accesses whose name starts with NAME.
        #[arg(long, value_name = "NAME")]
        reg: Option<String>,
        /// MMIO/DMA trace: read the events of --node from a file `rnic-emu run --trace`
        /// wrote instead of a running node.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["follow", "record", "socket_dir"])]
        from: Option<PathBuf>,
    },
    /// Inject a PCIe-side fault into a running node's RNIC (docs/faults.md), show its fault
    /// state (`status`), or change its wire faults (`wire tx|rx drop=0.05 ...`, docs/fabric.md).
    Fault {
        /// The server's --socket-dir.
        #[arg(long)]
        socket_dir: PathBuf,
        #[arg(long, default_value = "node0")]
        node: String,
        /// The RNIC (its id in the topology); default: the node's first.
        #[arg(long)]
        device: Option<String>,
        /// The fault and its arguments: dma-read-fail|dma-write-fail|poison [count=N|always]
        /// [addr=A len=L] [prob=P], cqe-delay ms=N, cqe-duplicate [deliver], msi-lost,
        /// msi-spurious [vector=V], cmd-timeout, async [code=C index=I], fatal,
        /// aer correctable|uncorrectable [bit=B], link down|up, flr-required, clear, seed S, status.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        fault: Vec<String>,
    },
    /// Build (or refresh) the guest image: images/build.sh.
    Image,
    /// Print the C register header generated from the register contract.
    GenHeader,
    /// Print the Markdown register reference generated from the register contract.
    GenDoc,
    /// Print the C ring-protocol header (guest-driver/include/uapi/rnic_emu_ring.h)
    /// generated from device/core/src/ring.rs.
    GenRingHeader,
}

fn main() -> ExitCode {
    rnic_emu::logging::init("warn");
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rnic-emu: {e:#}");
            ExitCode::from(checks::exit_code(&e, run::INTERRUPTED.load(Ordering::SeqCst)))
        }
    }
}

fn real_main() -> anyhow::Result<ExitCode> {
    match Cli::parse().cmd {
        Cmd::Serve { at, gpu_mem_dir, pcap, pcap_max_mib, segment } => {
            let (topo, i) = checks::topology_node(&at.topology, &at.node)?;
            checks::socket_dir(&at.socket_dir)?;
            if let Some(dir) = &gpu_mem_dir {
                checks::existing_dir("--gpu-mem-dir", dir)?;
            }
            if let Some(f) = &pcap {
                checks::output_file("--pcap", f)?;
            }
            let pcap_max_bytes = pcap_max_mib.map(|m| m.saturating_mul(1 << 20));
            serve::run_node(&topo, i, &serve::ServeOptions { socket_dir: at.socket_dir, gpu_mem_dir, pcap, pcap_max_bytes, segment })?;
        }
        Cmd::Run(args) => return run_cli::run(args),
        Cmd::QemuArgs { at, segment } => {
            let (topo, i) = checks::topology_node(&at.topology, &at.node)?;
            let segment = segment.unwrap_or_else(|| serve::default_segment(&topo));
            let nic = qemu::nic_args(&topo, i, &segment).map_err(anyhow::Error::msg).config()?;
            for a in qemu::device_args(&topo.nodes[i], &at.socket_dir).into_iter().chain(nic) {
                println!("{a}");
            }
        }
        Cmd::Stats { socket_dir, node } => {
            let node = checks::served_node(&socket_dir, &node)?;
            println!("{}", serde_json::to_string_pretty(&serve::query_stats(&socket_dir, &node)?)?);
        }
        Cmd::Model { topology, op, size, src, dst, nodes, collective, fabric, json } => {
            let mut topo = match topology {
                Some(t) => checks::topology(&t)?,
                None => Topology::parse(DEFAULT_TOPOLOGY, "single-switch.toml")?,
            };
            if let Some(f) = fabric {
                topo.timing.fabric = f;
            }
            print!("{}", timing_cli::model(&topo, op, size, src, dst, nodes, collective.as_deref(), json)?);
        }
        Cmd::Trace { socket_dir, node, qp, follow, json, record, mmio, dma, function, reg, from, .. } if mmio || dma => {
            let filter = rnic_emu::iotrace_client::Filter { mmio, dma, function, qp, reg };
            match (from, socket_dir) {
                (Some(file), _) => {
                    let node = node.parse::<usize>().map_or(node.clone(), |i| format!("node{i}"));
                    iotrace_cli::from_file(&file, &node, &filter, json)?
                }
                (None, Some(dir)) => {
                    let node = checks::served_node(&dir, &node)?;
                    iotrace_cli::trace(&dir, &node, record.as_deref(), &filter, json, follow)?
                }
                (None, None) => unreachable!("clap requires --socket-dir without --from"),
            }
        }
        Cmd::Trace { socket_dir, node, qp, follow, topology, json, record, function, reg, from, .. } => {
            if function.is_some() || reg.is_some() || from.is_some() {
                return Err(anyhow::anyhow!("--function, --reg and --from are for the MMIO/DMA trace: add --mmio and/or --dma")).config();
            }
            let socket_dir = socket_dir.unwrap_or_default();
            let node = checks::served_node(&socket_dir, &node)?;
            if let Some(r) = record {
                anyhow::ensure!(r == "on" || r == "off", "--record takes on or off");
                println!("{}", serve::control_request(&socket_dir, &node, &format!("trace {r}"))?);
                return Ok(ExitCode::SUCCESS);
            }
            let topo = topology.map(|t| checks::topology(&t)).transpose()?;
            timing_cli::wqe_log(&socket_dir, &node, qp, follow, topo.as_ref(), json)?;
        }
        Cmd::Fault { socket_dir, node, device, fault } => {
            let request = match fault.split_first() {
                Some((w, rest)) if w == "wire" => format!("faults {}", rest.join(" ")),
                _ => format!("pcie {}{}", device.map(|d| format!("dev={d} ")).unwrap_or_default(), fault.join(" ")),
            };
            let reply = serve::control_request(&socket_dir, &node, &request)?;
            match (reply["ok"].as_str(), reply["error"].as_str()) {
                (Some(ok), _) => println!("{ok}"),
                (_, Some(e)) => anyhow::bail!("node {node}: {e}"),
                _ => println!("{reply}"),
            }
        }
        Cmd::Image => image::build()?,
        Cmd::GenHeader => print!("{}", contract::render::c_header()),
        Cmd::GenDoc => print!("{}", contract::render::markdown()),
        Cmd::GenRingHeader => print!("{}", rnic_emu_core::ring::c_header()),
    }
    Ok(ExitCode::SUCCESS)
}
