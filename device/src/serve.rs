//! `rnic-emu serve`: one process per emulated node, one vfio-user socket per PCI function.
//!
//! rust-vmm's `Server::run` accepts one connection and blocks on it, so each function gets
//! a socket thread that serves a client until it disconnects, resets the function and
//! accepts the next one (QEMU restarts, a test client comes and goes). A panic inside the
//! vfio-user library while handling a hostile message ends that connection only.

use crate::gpu::Gpu;
use crate::rnic::Rnic;
use crate::router::Peer;
use crate::shm::SharedMemory;
use crate::topology::{DeviceKind, Node};
use crate::vfio::{self, Backend, SharedFunction};
use anyhow::Context;
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
}

/// A node's functions, built from its description, before serving.
pub struct NodeDevices {
    pub functions: Vec<(PathBuf, SharedFunction)>,
}

impl NodeDevices {
    /// Builds the node's functions: GPUs first, so that each RNIC's DMA router knows every
    /// GPU's BAR1 window and the PCIe path to it (from the topology).
    pub fn build(node: &Node, opts: &ServeOptions) -> anyhow::Result<NodeDevices> {
        let mut functions = Vec::new();
        let mut gpus = Vec::new();
        for dev in node.devices.iter().filter(|d| d.kind == DeviceKind::Gpu) {
            let name = format!("{}-{}", node.name, dev.id);
            let mem = match &opts.gpu_mem_dir {
                Some(dir) => SharedMemory::file(&dir.join(format!("{name}.bar1")), dev.bar1_size())?,
                None => SharedMemory::memfd(&format!("rnic-emu-{name}-bar1"), dev.bar1_size())?,
            };
            let gpu = Gpu::new(name, dev, mem)?;
            gpus.push((dev, gpu.window()));
            functions.push((opts.socket_dir.join(node.socket_name(dev)), Arc::new(Mutex::new(gpu)) as SharedFunction));
        }
        for dev in node.devices.iter().filter(|d| d.kind == DeviceKind::Rnic) {
            let peers = gpus.iter().map(|(g, w)| Peer { window: w.clone(), path: node.p2p_path(dev, g) }).collect();
            let rnic = Rnic::new(format!("{}-{}", node.name, dev.id), dev, peers)?;
            functions.push((opts.socket_dir.join(node.socket_name(dev)), Arc::new(Mutex::new(rnic)) as SharedFunction));
        }
        Ok(NodeDevices { functions })
    }

    /// Binds every socket, then serves each on its own thread. Returns once all sockets
    /// exist, so a caller may start QEMU right away.
    pub fn serve(self) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let mut servers = Vec::new();
        for (path, f) in self.functions {
            let (regions, irqs) = {
                let guard = vfio::lock(&f);
                (vfio::regions(&*guard), vfio::irqs(&*guard))
            };
            let server = Server::new(&path, true, irqs, regions)
                .with_context(|| format!("binding vfio-user socket {}", path.display()))?;
            log::info!("{}: listening on {}", vfio::lock(&f).name(), path.display());
            servers.push((server, f));
        }
        Ok(servers
            .into_iter()
            .map(|(server, f)| std::thread::spawn(move || serve_forever(&server, f)))
            .collect())
    }
}

fn serve_forever(server: &Server, f: SharedFunction) {
    let name = vfio::lock(&f).name().to_string();
    let mut backend = Backend::new(f);
    loop {
        match catch_unwind(AssertUnwindSafe(|| server.run(&mut backend))) {
            Ok(Ok(())) => log::info!("{name}: client disconnected"),
            Ok(Err(e)) => {
                log::warn!("{name}: connection ended: {e}");
                std::thread::sleep(Duration::from_millis(50)); // no hot loop if accept keeps failing
            }
            Err(_) => log::error!("{name}: the vfio-user handler panicked on a client message; connection dropped"),
        }
        backend.disconnected();
        log::info!("{name}: reset; waiting for the next client");
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

/// Serves a node until SIGINT/SIGTERM, then removes its sockets.
pub fn run_node(node: &Node, opts: &ServeOptions) -> anyhow::Result<()> {
    std::fs::create_dir_all(&opts.socket_dir)?;
    let devices = NodeDevices::build(node, opts)?;
    remove_stale_sockets(&devices.functions);
    let paths: Vec<PathBuf> = devices.functions.iter().map(|(p, _)| p.clone()).collect();
    let (tx, rx) = std::sync::mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })?;
    let _threads = devices.serve()?;
    log::info!("node {} ready ({} functions)", node.name, paths.len());
    let _ = rx.recv();
    log::info!("node {}: signal received, shutting down", node.name);
    remove_sockets(&paths);
    Ok(())
}

fn remove_sockets(paths: &[PathBuf]) {
    for p in paths {
        let _ = std::fs::remove_file(Path::new(p));
    }
}
