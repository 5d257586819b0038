//! `rnic-emu serve`: one process per emulated node, one vfio-user socket per PCI function.
//!
//! The server layer puts the node together: it builds the device models (which own no
//! sockets and no threads), binds the node's fabric port, hands every RNIC's verbs engine
//! and the port to the node's event loop (`evloop`), and serves each function's socket.
//! rust-vmm's `Server::run` accepts one connection and blocks on it, so each function gets
//! a socket thread that serves a client until it disconnects, resets the function and
//! accepts the next one (QEMU restarts, a test client comes and goes). A panic inside the
//! vfio-user library while handling a hostile message ends that connection only. The
//! control socket (`control`) has its own threads too (its requests lock functions; the
//! loop never takes a function lock). The node's MMIO/DMA trace (`iotrace` control
//! requests) is shared by every function's vfio-user adapter and every RNIC's DMA router.

use crate::control::{self, Control};
use crate::evloop::{self, LoopHandle, NodeEngine, NodeEngines, NodeGpu};
use crate::fabric::port::FabricPort;
use crate::fabric::segment::{self, MulticastAddr, SegmentAddr};
use crate::vfio::{self, Backend, SharedFunction};
use anyhow::Context;
use rnic_emu_core::gpu::Gpu;
use rnic_emu_core::mailbox::Mailbox;
use rnic_emu_core::observe::iotrace::IoTrace;
use rnic_emu_core::platform::mem::router::Peer;
use rnic_emu_core::platform::shm::SharedMemory;
use rnic_emu_core::platform::topology::{DeviceKind, Topology};
use rnic_emu_core::rnic::Rnic;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use vfio_user::Server;

/// Options of `serve` that are not part of the topology.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// Directory for the vfio-user sockets.
    pub socket_dir: PathBuf,
    /// Back GPU memory with files `<dir>/<node>-<gpu>.bar1` instead of anonymous memfds.
    pub gpu_mem_dir: Option<PathBuf>,
    /// Capture the node's fabric traffic to this pcap file.
    pub pcap: Option<PathBuf>,
    /// The capture file's size bound (None: `fabric::pcap::DEFAULT_MAX_BYTES`).
    pub pcap_max_bytes: Option<u64>,
    /// The L2 segment the node's port joins (None: [`default_segment`] of the topology).
    pub segment: Option<SegmentAddr>,
}

/// The segment of a topology's nodes when none is given: the default group, on loopback,
/// at a port derived from the topology's name (46000..=49999). `rnic-emu run` gives every
/// run a segment of its own instead, so that two runs of one topology stay apart.
pub fn default_segment(topo: &Topology) -> SegmentAddr {
    let hash = topo.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    SegmentAddr::Multicast(MulticastAddr { group: segment::DEFAULT_GROUP, port: 46000 + (hash % 4000) as u16, interface: std::net::Ipv4Addr::LOCALHOST })
}

/// A node's functions, built from its description, before serving, with the engines and
/// fabric ports its event loop will drive.
pub struct NodeDevices {
    pub name: String,
    pub functions: Vec<(PathBuf, SharedFunction)>,
    pub ports: Vec<Arc<FabricPort>>,
    /// The node's MMIO/DMA trace (off until an `iotrace on` request).
    pub io: Arc<IoTrace>,
    engines: Vec<NodeEngine>,
    gpu_engines: Vec<NodeGpu>,
}

/// A serving node: its socket threads and its event loop (stopped when dropped).
pub struct Serving {
    pub sockets: Vec<JoinHandle<()>>,
    pub event_loop: LoopHandle,
}

impl NodeDevices {
    /// Builds the node's functions: GPUs first, so that each RNIC's DMA router knows every
    /// GPU's BAR1 window and the PCIe path to it (from the topology).
    pub fn build(topo: &Topology, index: usize, opts: &ServeOptions) -> anyhow::Result<NodeDevices> {
        let node = &topo.nodes[index];
        let mut functions = Vec::new();
        let mut gpus = Vec::new();
        let (mut ports, mut engines, mut gpu_engines) = (Vec::new(), Vec::new(), Vec::new());
        let io = Arc::new(IoTrace::default());
        if let Some(dir) = &opts.gpu_mem_dir {
            // The files are opened without following a symlink; the directory must not be one either.
            let meta = std::fs::symlink_metadata(dir).with_context(|| format!("--gpu-mem-dir {}", dir.display()))?;
            anyhow::ensure!(meta.is_dir(), "--gpu-mem-dir {}: not a directory (a symlink is refused)", dir.display());
        }
        let pcap = opts.pcap.as_deref().map(|p| (p, opts.pcap_max_bytes.unwrap_or(crate::fabric::pcap::DEFAULT_MAX_BYTES)));
        for dev in node.devices.iter().filter(|d| d.kind == DeviceKind::Gpu) {
            let name = format!("{}-{}", node.name, dev.id);
            let mem = match &opts.gpu_mem_dir {
                Some(dir) => SharedMemory::file(&dir.join(format!("{name}.bar1")), dev.bar1_size())?,
                None => SharedMemory::memfd(&format!("rnic-emu-{name}-bar1"), dev.bar1_size())?,
            };
            let mut gpu = Gpu::new(name, dev, mem)?;
            let mailbox = Arc::new(Mailbox::new()?);
            let runner = gpu.attach(mailbox.clone()).context("the GPU's engine is already attached")?;
            gpu_engines.push(NodeGpu { runner, mailbox });
            gpus.push((dev, gpu.window()));
            functions.push((opts.socket_dir.join(node.socket_name(dev)), Arc::new(Mutex::new(gpu)) as SharedFunction));
        }
        for dev in node.devices.iter().filter(|d| d.kind == DeviceKind::Rnic) {
            let peers = gpus.iter().map(|(g, w)| Peer { window: w.clone(), path: node.p2p_path(dev, g) }).collect();
            // Single-node topologies have no fabric (their RNIC_REG_IPV4 reads 0).
            let address = (topo.nodes.len() > 1).then(|| topo.address(index));
            let segment = opts.segment.clone().unwrap_or_else(|| default_segment(topo));
            let mut rnic = Rnic::new(format!("{}-{}", node.name, dev.id), dev, peers, address)?;
            anyhow::ensure!(rnic.trace_into(io.clone()), "the RNIC's router is already shared");
            rnic.arm_faults(&node.faults).map_err(|e| anyhow::anyhow!("node {}: faults.pcie: {e}", node.name))?;
            let port = match address {
                Some(a) => Some(Arc::new(
                    FabricPort::bind(a, segment.clone(), rnic.eth_shared(), &node.faults, pcap, rnic.stats_block())
                        .map_err(|e| anyhow::anyhow!("joining the fabric segment {segment}: {e}"))?,
                )),
                None => None,
            };
            let mailbox = Arc::new(Mailbox::new()?);
            let (mut runner, router) = rnic.attach(mailbox.clone()).context("the RNIC's engine is already attached")?;
            if let Some(p) = &port {
                runner.engine.set_wire(p.clone());
                ports.push(p.clone());
            }
            engines.push(NodeEngine { runner, router, mailbox, port });
            functions.push((opts.socket_dir.join(node.socket_name(dev)), Arc::new(Mutex::new(rnic)) as SharedFunction));
        }
        Ok(NodeDevices { name: node.name.clone(), functions, ports, io, engines, gpu_engines })
    }

    /// Binds every socket, starts the event loop, then serves each socket on its own
    /// thread. Returns once all sockets exist, so a caller may start QEMU right away.
    pub fn serve(self) -> anyhow::Result<Serving> {
        let mut servers = Vec::new();
        for (path, f) in self.functions {
            let (regions, irqs) = {
                let guard = vfio::lock(&f);
                (vfio::regions(&*guard), vfio::irqs(&*guard))
            };
            let server = Server::new(&path, true, irqs, regions).with_context(|| format!("binding vfio-user socket {}", path.display()))?;
            log::info!("{}: listening on {}", vfio::lock(&f).name(), path.display());
            servers.push((server, f));
        }
        let work = NodeEngines::new(self.engines, self.gpu_engines);
        let event_loop = evloop::spawn(&self.name, work, evloop::busy_poll_from_env()).context("starting the event loop")?;
        let mut sockets = Vec::new();
        for (server, f) in servers {
            let name = format!("{}-vfio", vfio::lock(&f).name());
            let io = self.io.clone();
            sockets.push(std::thread::Builder::new().name(name).spawn(move || serve_forever(&server, f, io))?);
        }
        Ok(Serving { sockets, event_loop })
    }
}

fn serve_forever(server: &Server, f: SharedFunction, io: Arc<IoTrace>) {
    let name = vfio::lock(&f).name().to_string();
    let mut backend = Backend::traced(f, io);
    loop {
        match catch_unwind(AssertUnwindSafe(|| server.run(&mut backend))) {
            Ok(Ok(())) => rnic_emu_core::guest_info!("{name}: client disconnected"),
            Ok(Err(e)) => {
                rnic_emu_core::guest_warn!("{name}: connection ended: {e}");
                std::thread::sleep(Duration::from_millis(50)); // no hot loop if accept keeps failing
            }
            Err(_) => rnic_emu_core::guest_warn!("{name}: the vfio-user handler panicked on a client message; connection dropped"),
        }
        backend.disconnected();
        rnic_emu_core::guest_info!("{name}: reset; waiting for the next client");
    }
}

/// Removes sockets left by an earlier server that died without cleaning up.
pub fn remove_stale_sockets(functions: &[(PathBuf, SharedFunction)]) {
    for (path, _) in functions {
        if path.exists() {
            log::warn!("removing stale socket {}", path.display());
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The control socket of a node: `<socket_dir>/<node>.ctl`.
pub fn control_path(socket_dir: &Path, node: &str) -> PathBuf {
    socket_dir.join(format!("{node}.ctl"))
}

/// Asks a running node server for its counters (`rnic-emu stats`).
pub fn query_stats(socket_dir: &Path, node: &str) -> anyhow::Result<serde_json::Value> {
    control_request(socket_dir, node, "stats")
}

/// The statistics entry of the server process itself, beside its functions' entries.
pub fn server_stats_key(node: &str) -> String {
    format!("{node}-server")
}

/// The statistics entry of the node's fabric segment (its first port's).
pub fn segment_stats_key(node: &str) -> String {
    format!("{node}-segment")
}

/// Every function's counters as JSON, and the process's own under `<node>-server`:
/// {"<function>": {"<counter>": value, ...}, ..., "<node>-server": {"log_lines_suppressed": n,
/// "control_...": n (`control::counters`)}},
/// with the fabric segment's under `<node>-segment` when the node has a port
/// (`fabric::segment::SegmentStats`).
pub fn stats_json_with_ports(node: &str, functions: &[(PathBuf, SharedFunction)], ports: &[Arc<FabricPort>]) -> serde_json::Value {
    let mut all = stats_json(node, functions);
    if let (Some(p), Some(map)) = (ports.first(), all.as_object_mut()) {
        let counters: serde_json::Map<String, serde_json::Value> = p.segment_counters().map(|(k, v)| (k.to_string(), v.into())).collect();
        map.insert(segment_stats_key(node), counters.into());
    }
    all
}

/// Every function's counters and the process's own, as [`stats_json_with_ports`] without
/// the segment.
pub fn stats_json(node: &str, functions: &[(PathBuf, SharedFunction)]) -> serde_json::Value {
    let mut all = serde_json::Map::new();
    let mut server = serde_json::Map::new();
    server.insert("log_lines_suppressed".into(), rnic_emu_core::ratelimit::suppressed_total().into());
    server.extend(control::counters().into_iter().map(|(k, v)| (k.to_string(), v.into())));
    all.insert(server_stats_key(node), server.into());
    for (_, f) in functions {
        let f = vfio::lock(f);
        let counters: serde_json::Map<String, serde_json::Value> =
            f.stats().into_iter().map(|(k, v)| (rnic_emu_core::contract::render::snake_lower(k), v.into())).collect();
        all.insert(f.name().to_string(), counters.into());
    }
    all.into()
}

/// Sends one control request to a running node server; returns its JSON reply.
pub fn control_request(socket_dir: &Path, node: &str, request: &str) -> anyhow::Result<serde_json::Value> {
    use std::io::{BufRead, BufReader, Write};
    let path = control_path(socket_dir, node);
    let mut s = std::os::unix::net::UnixStream::connect(&path).with_context(|| format!("connecting to {}", path.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    writeln!(s, "{request}")?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    Ok(serde_json::from_str(&line)?)
}

/// glibc's malloc arenas the server process may have. Clients come and go on threads (a
/// vfio-user connection's, a control client's), and glibc gives an allocating thread an
/// arena of its own, up to 8 per CPU, that stays mapped for the life of the process: a
/// client that connects often grows the server's mappings until that bound. Two (the main
/// one and one shared by every thread) keep the footprint fixed after the first client;
/// the loop's packet path does not allocate, so the shared arena is not contended.
const MALLOC_ARENAS: i32 = 2;

/// Bounds glibc's malloc arenas to [`MALLOC_ARENAS`] (other C libraries: nothing to do).
fn bound_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a tuning parameter of the allocator; it is called before
    // the node's threads start.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS);
    }
}

/// Serves a node until SIGINT/SIGTERM, then removes its sockets.
pub fn run_node(topo: &Topology, index: usize, opts: &ServeOptions) -> anyhow::Result<()> {
    bound_malloc_arenas();
    let node = &topo.nodes[index];
    std::fs::create_dir_all(&opts.socket_dir).with_context(|| format!("creating the socket directory {}", opts.socket_dir.display()))?;
    let devices = NodeDevices::build(topo, index, opts)?;
    remove_stale_sockets(&devices.functions);
    let mut paths: Vec<PathBuf> = devices.functions.iter().map(|(p, _)| p.clone()).collect();
    let (functions, ports, io) = (devices.functions.clone(), devices.ports.clone(), devices.io.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })?;
    let _serving = devices.serve()?;
    // The control socket comes last: its existence tells callers (the host driver, `run`)
    // that every function's socket is there.
    let ctl = control_path(&opts.socket_dir, &node.name);
    let _ = std::fs::remove_file(&ctl);
    let listener = std::os::unix::net::UnixListener::bind(&ctl).with_context(|| format!("binding {}", ctl.display()))?;
    let ctx = Control { node: node.name.clone(), functions, ports, io };
    let ctl_path = ctl.clone();
    std::thread::Builder::new().name(format!("{}-control", node.name)).spawn(move || control::serve(ctx, listener, &ctl_path))?;
    paths.push(ctl);
    log::info!("node {} ready ({} functions)", node.name, paths.len());
    // Until the signal: once a second, report what the log limiters suppressed in an
    // interval that has ended (a flood that stopped gets its summary line too).
    while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_secs(1)) {
        rnic_emu_core::ratelimit::report_expired();
    }
    rnic_emu_core::ratelimit::report_all();
    log::info!("node {}: signal received, shutting down", node.name);
    remove_sockets(&paths);
    Ok(())
}

fn remove_sockets(paths: &[PathBuf]) {
    for p in paths {
        let _ = std::fs::remove_file(Path::new(p));
    }
}
