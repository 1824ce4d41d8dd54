//! `tether`: the edge worker and its companion commands.
//!
//! `tether serve` runs the edge; `tether token` mints credentials with the
//! edge's secret; `tether sim-device` connects a simulated device;
//! `tether call` and `tether sessions` drive the backend link from a shell;
//! `tether bridge` presents a stdio MCP server to the edge as a device;
//! `tether gateway` serves the MCP endpoint apart from a private edge (the
//! edge itself serves it at `/mcp` too). Each subcommand is a module of
//! [`cmd`]; what they share is in [`common`].

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use tether_config::LogFormat;

mod cmd;
mod common;

/// Every tether process allocates through mimalloc (see Cargo.toml for why).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "tether",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("TETHER_COMMIT"), ")"),
    about = "Realtime broker for tools that run on the client"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the edge worker (defaults: 127.0.0.1:7878, no config needed).
    Serve(cmd::serve::Args),
    /// Check a configuration file: print the resolved configuration, or every error with its location.
    Config {
        #[command(subcommand)]
        action: cmd::config::Action,
    },
    /// Print a token signed with the edge's secret.
    Token(cmd::token::Args),
    /// Connect a simulated device (the realistic fixture device) and keep it online.
    SimDevice(cmd::sim_device::Args),
    /// Serve a simulated MCP server on stdio (its slow tool runs as a task), to try `tether bridge` with.
    SimServer(cmd::sim_server::Args),
    /// Present a stdio MCP server to the edge as a device (restarted if it exits).
    Bridge(cmd::bridge::Args),
    /// Call a tool on a session, as an agent backend would.
    Call(cmd::read::CallArgs),
    /// Show one session: namespaced ↔ original names, seq, drops, recent calls.
    Inspect(cmd::read::InspectArgs),
    /// Ask an edge's /healthz or /readyz: exit 0 on 200 (a health check with no shell or curl).
    Probe(cmd::probe::Args),
    /// Run a simulated fleet with faults and a load driver; check the invariants.
    Soak(cmd::soak::Args),
    /// Measure tether against a bare tokio-tungstenite relay in the same run.
    Bench(cmd::bench::Args),
    /// The bare relay the bench compares with (no auth, no validation: never expose it).
    #[command(hide = true)]
    Relay(cmd::bench::RelayArgs),
    /// The independent bench's devices (spawned by `tether bench`).
    #[command(hide = true)]
    BenchFleet(cmd::bench::FleetArgs),
    /// The independent bench's load driver (spawned by `tether bench`).
    #[command(hide = true)]
    BenchDriver(cmd::bench::DriverArgs),
    /// Measure tool selection: recall and MRR of find_tools' search on a catalogue and turns.
    Eval(cmd::eval::EvalArgs),
    /// List connected sessions.
    Sessions(cmd::read::SessionsArgs),
    /// Serve the MCP endpoint (`/mcp`) for agent backends, apart from the edges
    /// (which stay private); `tether serve` serves it on its own port already.
    Gateway(cmd::gateway::Args),
}

async fn run(command: Command) -> Result<(), String> {
    match command {
        Command::Serve(args) => cmd::serve::run(args).await,
        Command::Config { action } => cmd::config::run(action),
        Command::Token(args) => cmd::token::run(args),
        Command::SimDevice(args) => cmd::sim_device::run(args).await,
        Command::SimServer(args) => cmd::sim_server::run(args).await,
        Command::Bridge(args) => cmd::bridge::run(args).await,
        Command::Call(args) => cmd::read::call(args).await,
        Command::Inspect(args) => cmd::read::inspect(args).await,
        Command::Probe(args) => cmd::probe::run(args).await,
        Command::Soak(args) => cmd::soak::run(args).await,
        Command::Bench(args) => cmd::bench::run(args).await,
        Command::Relay(args) => cmd::bench::relay(args).await,
        Command::BenchFleet(args) => cmd::bench::fleet(args).await,
        Command::BenchDriver(args) => cmd::bench::driver(args).await,
        Command::Sessions(args) => cmd::read::sessions(args).await,
        Command::Eval(args) => cmd::eval::run(&args).map_err(|e| e.to_string()),
        Command::Gateway(args) => cmd::gateway::run(args).await,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The independent bench's devices and driver run on one thread each, so
    // they stay light beside the server they measure.
    let runtime = match cli.command {
        Command::BenchFleet(_) | Command::BenchDriver(_) => {
            tokio::runtime::Builder::new_current_thread().enable_all().build()
        }
        _ => tokio::runtime::Builder::new_multi_thread().enable_all().build(),
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tether: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run_cli(cli))
}

async fn run_cli(cli: Cli) -> ExitCode {
    match cli.command {
        // `serve` sets up logging itself once it knows the configured format.
        Command::Serve(_) => {}
        // A soak injects faults on purpose; their warnings would drown the report.
        Command::Soak(_) => common::init_tracing("error", LogFormat::Pretty),
        // The bridge's log carries the MCP server's stderr (target mcp_server) at info.
        Command::Bridge(_) => common::init_tracing("info,rmcp=warn", LogFormat::Pretty),
        _ => common::init_tracing("warn", LogFormat::Pretty),
    }
    match run(cli.command).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tether: {e}");
            ExitCode::FAILURE
        }
    }
}
