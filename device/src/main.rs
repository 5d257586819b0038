use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "rnic-emu", version, about = "Emulated RDMA NIC + GPU for QEMU (vfio-user)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print the C register header generated from the register contract.
    GenHeader,
    /// Print the Markdown register reference generated from the register contract.
    GenDoc,
}

fn main() -> anyhow::Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    match Cli::parse().cmd {
        Cmd::GenHeader => print!("{}", rnic_emu::contract::c_header()),
        Cmd::GenDoc => print!("{}", rnic_emu::contract::markdown()),
    }
    Ok(())
}
