//! `rnic-emu run`: its options, checked before anything is built or started (the image
//! build is slow), turned into [`run::RunOptions`]; then the run itself and its exit code.

use crate::checks::{self, OrConfig};
use rnic_emu::{image, run};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

#[derive(clap::Args)]
pub struct RunArgs {
    /// Topology file (default: the embedded single-switch topology).
    #[arg(long)]
    topology: Option<PathBuf>,
    #[arg(long, default_value = "0")]
    node: String,
    /// Seconds before the guest is stopped.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Seconds of console silence after which a node whose kernel has not started
    /// /init counts as stalled and is booted again (nothing of the image ran yet), as
    /// is one whose QEMU ends before /init.
    #[arg(long, default_value_t = rnic_emu::bootwatch::STALL_SILENCE.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    boot_timeout: u64,
    /// Boots a node gets before a stall in early boot fails the run.
    #[arg(long, default_value_t = rnic_emu::bootwatch::BOOT_ATTEMPTS, value_parser = clap::value_parser!(u32).range(1..))]
    boot_attempts: u32,
    /// Run the node servers and QEMU in a network namespace of their own (root), so
    /// that several runs of one topology (fixed fabric addresses) can share a host.
    #[arg(long)]
    netns: bool,
    /// Do not run images/build.sh first (use the image as it is).
    #[arg(long)]
    no_build: bool,
    /// Do not load the rnic_emu driver before the command.
    #[arg(long)]
    no_driver: bool,
    #[arg(long)]
    gpu_mem_dir: Option<PathBuf>,
    /// Keep the working directory (logs, console, QEMU command line) on success too.
    #[arg(long)]
    keep: bool,
    /// After the command, write the device counters as the server saw them (JSON) here.
    #[arg(long)]
    stats: Option<PathBuf>,
    /// Capture every frame of the nodes' ports (pcap; with several nodes: FILE.<node> each).
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Stop recording once a node's pcap file would pass this size (MiB; default 256).
    #[arg(long, value_name = "MIB", requires = "pcap")]
    pcap_max_mib: Option<u64>,
    /// Join this L2 segment instead of one of the run's own: GROUP:PORT[@INTERFACE-ADDRESS]
    /// (multicast: to put plain QEMU guests or another run on the same segment), or, for a
    /// run of one node, vxlan:VNI@LOCAL-IP[:PORT],remote=IP[:PORT],... or tap:NAME
    /// (docs/fabric.md, "Backends").
    #[arg(long, value_name = "SEGMENT")]
    segment: Option<rnic_emu_server::fabric::segment::SegmentAddr>,
    /// Record every node's MMIO/DMA trace (register accesses and DMAs) to FILE as JSON
    /// lines (docs/trace.md).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Multi-node: run COMMAND on NODE (name or index); repeat for each node. All nodes
    /// boot at once, output lines are prefixed with the node, and the exit code is the
    /// first non-zero one.
    #[arg(long = "on", num_args = 2, value_names = ["NODE", "COMMAND"], action = clap::ArgAction::Append)]
    on: Vec<String>,
    /// The guest command (joined with spaces, run by sh), for --node.
    #[arg(last = true)]
    command: Vec<String>,
}

/// What the options ask for beyond the run itself.
struct Prepare {
    build_image: bool,
    netns: bool,
}

impl RunArgs {
    /// Checks every option (topology, nodes, output files) and resolves the topology file
    /// (`default_file` keeps the embedded default alive for the run).
    fn options(self, default_file: &mut Option<tempfile::NamedTempFile>) -> anyhow::Result<(run::RunOptions, Prepare)> {
        let RunArgs {
            topology,
            node,
            timeout,
            boot_timeout,
            boot_attempts,
            netns,
            no_build,
            no_driver,
            gpu_mem_dir,
            keep,
            stats,
            pcap,
            pcap_max_mib,
            segment,
            trace,
            on,
            command,
        } = self;
        let mut commands: Vec<(String, String)> = on.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect();
        match (commands.is_empty(), command.is_empty()) {
            (true, false) => commands.push((node, command.join(" "))),
            (false, true) => {}
            _ => return Err(anyhow::anyhow!("give either a command after -- (one node) or --on NODE COMMAND pairs")).config(),
        }
        let topology = match topology {
            Some(t) => t,
            None => {
                let f = default_file.insert(tempfile::Builder::new().suffix(".toml").tempfile()?);
                std::fs::write(f.path(), crate::DEFAULT_TOPOLOGY)?;
                f.path().to_path_buf()
            }
        };
        let topo = checks::topology(&topology)?;
        let mut seen = Vec::new();
        for (node, _) in &commands {
            let i = checks::node(&topo, &topology, node)?;
            if seen.contains(&i) {
                return Err(anyhow::anyhow!("node '{node}' is given more than one command")).config();
            }
            seen.push(i);
        }
        for (flag, file) in [("--stats", &stats), ("--pcap", &pcap), ("--trace", &trace)] {
            if let Some(f) = file {
                checks::output_file(flag, f)?;
            }
        }
        if let Some(dir) = &gpu_mem_dir {
            checks::existing_dir("--gpu-mem-dir", dir)?;
        }
        image::check_qemu_override().config()?;
        let opts = run::RunOptions {
            topology,
            commands,
            timeout: Duration::from_secs(timeout),
            boot_timeout: Duration::from_secs(boot_timeout),
            boot_attempts,
            server_bin: std::env::current_exe()?,
            gpu_mem_dir,
            load_driver: !no_driver,
            keep_workdir: keep,
            stats_file: stats,
            pcap,
            pcap_max_mib,
            segment,
            trace_file: trace,
        };
        Ok((opts, Prepare { build_image: !no_build, netns }))
    }
}

/// `rnic-emu run`: checks the options, builds the image unless told not to, boots the
/// nodes and passes the guest command's exit code through.
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut default_file = None;
    let (opts, prepare) = args.options(&mut default_file)?;
    ctrlc::set_handler(|| run::INTERRUPTED.store(true, Ordering::SeqCst))?;
    if prepare.build_image {
        image::build()?;
    }
    let img = image::ensure(false).config()?;
    if prepare.netns {
        rnic_emu::netns::enter_private().config()?;
    }
    let mut stdout = std::io::stdout();
    let outcome = run::run(&opts, &img, &mut |b| {
        let _ = stdout.write_all(b);
        let _ = stdout.flush();
    })?;
    if outcome.per_node.len() > 1 {
        for (n, code) in &outcome.per_node {
            eprintln!("rnic-emu: {n} exited {code}");
        }
    }
    if let Some(dir) = outcome.workdir {
        eprintln!("rnic-emu: logs kept in {}", dir.display());
    }
    Ok(ExitCode::from(u8::try_from(outcome.exit_code).unwrap_or(255)))
}
